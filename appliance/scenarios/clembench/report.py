"""clembench's aggregation: % played, quality and clemscore per game and overall.

As clemcore computes them: per game, % played = 100 x (1 - mean of Aborted)
over all episodes and quality = mean of Main Score over the episodes that
have one (aborted episodes have none); overall, both are averaged over games
and clemscore = average % played x average quality / 100. Lost and aborted
are counted apart. An episode that failed to run at all (its context
overflowed, the engine failed) counts as aborted, as in clembench, and its
cause is counted. Intervals resample episodes within each game.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from statistics import fmean, stdev

import numpy as np
from pydantic import BaseModel

from appliance.scenarios.clembench.results import folder_pairing
from appliance.store.run_view import RunView
from appliance.util.stats import DEFAULT_RESAMPLES, bootstrap_interval

#: episodes per game row below which the report says its figures say little (and the default run's size)
MIN_EPISODES_PER_ROW = 10


@dataclass(frozen=True)
class EpisodeResult:
    game: str
    aborted: bool
    main_score: float | None
    lost: bool = False
    #: the episode's instance, so two runs' episodes can be paired
    instance_id: str = ""
    #: why the episode failed to run (it then counts as aborted); None for a played episode
    failure: str | None = None
    #: the instance's language ("" where unknown, e.g. imported results)
    language: str = ""
    #: player replies cut by their token cap (finish reason `length`)
    cut_replies: int = 0


@dataclass(frozen=True)
class Aggregate:
    played: dict[str, float]
    quality: dict[str, float | None]
    average_played: float
    average_quality: float | None
    clemscore: float | None


def aggregate(results: list[EpisodeResult]) -> Aggregate:
    by_game: dict[str, list[EpisodeResult]] = defaultdict(list)
    for result in results:
        by_game[result.game].append(result)
    played = {game: 100 * (1 - fmean(r.aborted for r in rows)) for game, rows in sorted(by_game.items())}
    quality: dict[str, float | None] = {}
    for game, rows in sorted(by_game.items()):
        scores = [r.main_score for r in rows if r.main_score is not None]
        quality[game] = fmean(scores) if scores else None
    qualities = [q for q in quality.values() if q is not None]
    average_played = fmean(played.values()) if played else 0.0
    average_quality = fmean(qualities) if qualities else None
    if average_quality is None:  # nothing scored: zero if nothing was played, else undefined
        clemscore = 0.0 if played and average_played == 0 else None
    else:
        clemscore = average_played * average_quality / 100
    return Aggregate(played, quality, average_played, average_quality, clemscore)


class GameFigures(BaseModel):
    game: str
    episodes: int
    #: aborted episodes (a rule broken, or the episode failed to run: see `failed`)
    aborted: int
    failed: int = 0
    lost: int
    won: int
    played: float
    quality: float | None
    quality_std: float | None
    quality_ci: tuple[float, float] | None
    #: player replies cut by their token cap
    cut_replies: int = 0


class ClemRow(BaseModel):
    player: str
    episodes: int
    #: episodes that failed to run; they count as aborted
    failed: int
    #: why they failed (numbers masked) -> how often
    failures: dict[str, int] = {}
    games: list[GameFigures]
    played: float
    played_ci: tuple[float, float] | None
    quality: float | None
    quality_ci: tuple[float, float] | None
    clemscore: float | None
    clemscore_ci: tuple[float, float] | None


class LanguageRow(BaseModel):
    """The paper's Table 2: a game in another language against the same game in English."""

    player: str
    game: str
    language: str
    played: float
    quality: float | None
    played_change: float | None
    quality_change: float | None


class ClemReport(BaseModel):
    run_id: str
    scenario: str
    status: str
    #: self-play: clemscore as the paper's Table 1 (English games)
    rows: list[ClemRow]
    #: cross-play pairs (A--B, A in the first role), on the two-player games, apart from the ranking
    cross_play: list[ClemRow] = []
    languages: list[LanguageRow] = []


def bootstrap_aggregate(
    results: list[EpisodeResult], resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> dict[str, tuple[float, float] | None]:
    """95% intervals of average % played, average quality and clemscore, resampling within games."""
    by_game: dict[str, list[EpisodeResult]] = defaultdict(list)
    for result in results:
        by_game[result.game].append(result)
    rng = np.random.default_rng(seed)
    estimates: dict[str, list[float]] = {"played": [], "quality": [], "clemscore": []}
    for _ in range(resamples):
        sample = [rows[i] for rows in by_game.values() for i in rng.integers(0, len(rows), len(rows))]
        figures = aggregate(sample)
        estimates["played"].append(figures.average_played)
        if figures.average_quality is not None and figures.clemscore is not None:
            estimates["quality"].append(figures.average_quality)
            estimates["clemscore"].append(figures.clemscore)
    return {key: _interval(values) for key, values in estimates.items()}


def _interval(values: list[float]) -> tuple[float, float] | None:
    if not values:
        return None
    low, high = np.quantile(np.asarray(values), [0.025, 0.975])
    return float(low), float(high)


def load_results(run: RunView) -> tuple[dict[str, list[EpisodeResult]], dict[str, int]]:
    """Every episode's result per player (failed ones as aborted), and the count of episodes that failed to run."""
    figures: dict[str, dict[str, float]] = defaultdict(dict)
    for score in run.scores(metrics=["Aborted", "Main Score", "Lose"], finished_only=False):
        if score.value is not None:
            known = figures[score.episode_id].get(score.metric)
            figures[score.episode_id][score.metric] = score.value if known is None else max(known, score.value)
    cut = Counter(m.episode_id for m in run.messages() if m.finish_reason == "length")
    results: dict[str, list[EpisodeResult]] = defaultdict(list)
    failed: dict[str, int] = defaultdict(int)
    for episode in run.episodes():
        own = figures.get(episode.episode_id, {})
        aborted = own.get("Aborted")
        language = str(episode.metadata.get("language", ""))
        game = game_row(str(episode.metadata.get("game", "unknown")), language)
        if not episode.finished or aborted is None:
            failed[episode.player] += 1
            cause = failure_cause(episode.error or "no 'Aborted' score was stored")
            results[episode.player].append(
                EpisodeResult(game, True, None, False, episode.instance_id, cause, language, cut[episode.episode_id])
            )
            continue
        main_score = own.get("Main Score")
        main = None if main_score is None or np.isnan(main_score) else float(main_score)
        lost = bool(own.get("Lose"))
        results[episode.player].append(
            EpisodeResult(game, bool(aborted), main, lost, episode.instance_id, None, language, cut[episode.episode_id])
        )
    return results, failed


def cross_play_labels(run: RunView) -> set[str]:
    """The player labels under which two different models played (the second in the partner roles), from
    the models stored with each episode; an episode imported before they were stored has clembench's folder
    name as its label, which names them."""
    labels: set[str] = set()
    for episode in run.episodes():
        models = (episode.player_model, episode.partner_model)
        player, partner = folder_pairing(episode.player) if models[0] is None else models
        if partner is not None and partner != player:
            labels.add(episode.player)
    return labels


def game_row(game: str, language: str) -> str:
    """A game in another language than English is its own row, as clembench keeps it (`referencegame_de`)."""
    return game if language in ("", "en") else f"{game}_{language}"


def headline_results(results: list[EpisodeResult]) -> list[EpisodeResult]:
    """What clemscore is computed on: the English games, as the paper's Table 1 (all games where none is)."""
    english = [r for r in results if r.language in ("", "en")]
    return english or results


def failure_cause(error: str) -> str:
    """An error message with its numbers masked, so that failures of one kind are counted together."""
    return re.sub(r"\d+", "N", error.splitlines()[0] if error else "unknown")[:120]


def build_clem_report(run: RunView, panel: str | None = None) -> ClemReport:
    """Rule-scored: `panel` is accepted for a uniform report signature and has no effect."""
    status = run.status
    results, failed = load_results(run)
    rows = []
    for player in sorted(set(results) | set(failed)):
        episodes = results.get(player, [])
        headline = headline_results(episodes)
        overall = aggregate(headline) if headline else Aggregate({}, {}, 0.0, None, None)
        per_game = aggregate(episodes) if episodes else Aggregate({}, {}, 0.0, None, None)
        intervals = bootstrap_aggregate(headline) if headline else {}
        rows.append(
            ClemRow(
                player=player,
                episodes=len(episodes),
                failed=failed.get(player, 0),
                failures=dict(Counter(r.failure for r in episodes if r.failure is not None)),
                games=[
                    _game_figures(game, per_game, [r for r in episodes if r.game == game]) for game in per_game.played
                ],
                played=overall.average_played,
                played_ci=intervals.get("played"),
                quality=overall.average_quality,
                quality_ci=intervals.get("quality"),
                clemscore=overall.clemscore,
                clemscore_ci=intervals.get("clemscore"),
            )
        )
    rows.sort(key=lambda row: -(row.clemscore or 0.0))
    cross = cross_play_labels(run)
    self_play = [row for row in rows if row.player not in cross]
    return ClemReport(
        run_id=run.run_id,
        scenario=run.scenario,
        status=status,
        rows=self_play,
        cross_play=[row for row in rows if row.player in cross],
        languages=[lang for row in self_play for lang in _language_rows(row, results.get(row.player, []))],
    )


def _language_rows(row: ClemRow, episodes: list[EpisodeResult]) -> list[LanguageRow]:
    figures = {game.game: game for game in row.games}
    found = sorted({(r.game, r.language) for r in episodes if r.language not in ("", "en")})
    languages = []
    for game, language in found:
        english = figures.get(game.removesuffix(f"_{language}"))
        own = figures[game]
        quality_change = (
            None if english is None or english.quality is None or own.quality is None else own.quality - english.quality
        )
        languages.append(
            LanguageRow(
                player=row.player,
                game=game.removesuffix(f"_{language}"),
                language=language,
                played=own.played,
                quality=own.quality,
                played_change=None if english is None else own.played - english.played,
                quality_change=quality_change,
            )
        )
    return languages


def _game_figures(game: str, figures: Aggregate, episodes: list[EpisodeResult]) -> GameFigures:
    scores = [r.main_score for r in episodes if r.main_score is not None]
    aborted = sum(r.aborted for r in episodes)
    lost = sum(r.lost and not r.aborted for r in episodes)
    return GameFigures(
        game=game,
        episodes=len(episodes),
        aborted=aborted,
        failed=sum(r.failure is not None for r in episodes),
        lost=lost,
        won=len(episodes) - aborted - lost,
        played=figures.played[game],
        quality=figures.quality[game],
        quality_std=stdev(scores) if len(scores) > 1 else None,
        quality_ci=bootstrap_interval(scores),
        cut_replies=sum(r.cut_replies for r in episodes),
    )
