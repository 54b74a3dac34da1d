"""The PingPong leaderboard of a stored run.

Per model: mean of each criterion, the final score (mean of the criteria,
averaged over conversations) with a bootstrap 95% interval over
conversations, the share of conversations with a refusal, the mean length
of the player's replies, and the length-normalised score.

Refusals, as the authors' leaderboard code treats them: a conversation in
which any judge flagged any turn counts in the refusal ratio (over the
conversations whose refusals were judged); the flagging judges' verdicts on
it were dropped when its scores were made, so it is scored by the other
judges, or not at all. A panel that did not judge refusals (a likelihood
panel) leaves the ratio empty ("not measured"), never 0.

Languages, as the paper reports them: one leaderboard per language (the authors' table script runs
once per language folder, each with its own length median and ranking), then the languages pooled
into one table, which is ours. A run stored before episodes recorded their language has the pooled
table only.

Length normalisation, as the authors' leaderboard computes it: each
conversation's score is multiplied by x = 1 + 0.07 * (median_len / avg_len - 1),
clamped to [0.93, 1], where avg_len is the model's mean player-reply length in
characters (finished conversations) and median_len the median of the models'
avg_len. A long-winded model loses at most 7%; a terse one gains nothing.
The factor scales a score on a rating scale: the 1-5 final of a sampled panel,
or, under a likelihood panel, the calibrated final on the human scale. A raw
log-probability difference (which can be negative) gets no LN score.
"""

from __future__ import annotations

from statistics import mean, median

from pydantic import BaseModel

from appliance.errors import ApplianceError
from appliance.scenarios.pingpong.family import CRITERIA, LIKELIHOOD_TARGETS
from appliance.store.run_view import RunView, StoredEpisode, StoredMessage, StoredScore
from appliance.util.stats import bootstrap_interval


class PingPongRow(BaseModel):
    model: str
    episodes: int
    failed_episodes: int
    judged_episodes: int
    in_character: float | None
    entertaining: float | None
    fluent: float | None
    final: float | None
    final_ci: tuple[float, float] | None
    #: None where nothing judged refusals (a likelihood panel): shown as "not measured"
    refusal_ratio: float | None
    refused_episodes: int
    mean_length: float | None
    length_factor: float
    ln_score: float | None
    ln_score_ci: tuple[float, float] | None
    unparsed_verdicts: int
    #: player replies cut by the token cap (finish reason "length"); interrogator messages likewise
    cut_replies: int = 0
    cut_interrogator_messages: int = 0
    #: conversations that ended before their situation's turns because a prompt outgrew a context
    ended_early: int = 0
    #: the final score mapped to the human scale of the calibration (see PingPongLeaderboard.calibration)
    calibrated_final: float | None = None
    calibrated_final_ci: tuple[float, float] | None = None
    #: the criteria a likelihood panel's calibrations map to their own human scales
    #: (see PingPongLeaderboard.criterion_calibrations)
    calibrated_entertaining: float | None = None
    calibrated_fluent: float | None = None


class PingPongLeaderboard(BaseModel):
    run_id: str
    scenario: str
    panel: str
    status: str
    #: the median over models of their mean reply length (the length normalisation's reference)
    median_of_mean_lengths: float | None
    #: how the panel judged: "conversation" (the paper's) or "turn"
    judging: str
    rows: list[PingPongRow]
    #: the calibration applied to the final score: id, label set, criterion, template, human scale and
    #: its held-out Spearman with the human mean
    calibration: dict[str, object] | None = None
    #: the same for each criterion calibrated on its own (a likelihood panel's entertaining, fluent)
    criterion_calibrations: dict[str, dict[str, object]] = {}
    #: every panel whose scores this run holds
    panels: list[str] = []
    #: the language of this table's conversations; None where it pools several (or they were not recorded)
    language: str | None = None
    #: the paper's tables: one per language, each with its own length median (empty for one language)
    by_language: list[PingPongLeaderboard] = []


LENGTH_PENALTY = 0.07
#: the criteria a likelihood panel calibrates one by one, beside the final score
CALIBRATED_CRITERIA = tuple(metric for metric in LIKELIHOOD_TARGETS if metric != "final")


def length_factor(model_mean: float | None, median_of_means: float | None) -> float:
    """The authors' factor: 1 + 0.07 * (median / mean - 1), clamped to [0.93, 1]."""
    if not model_mean or not median_of_means:
        return 1.0
    factor = 1.0 + LENGTH_PENALTY * (median_of_means / model_mean - 1.0)
    return min(1.0, max(1.0 - LENGTH_PENALTY, factor))


def build_leaderboard(run: RunView, panel: str | None = None) -> PingPongLeaderboard:
    """The pooled leaderboard, with the paper's per-language tables inside it when the run has several."""
    panels = run.scored_panels()
    panel = panel or run.panel
    if panels and panel not in panels:
        scored = ", ".join(panels)
        raise ApplianceError(f"--panel: run '{run.run_id}' has no scores of panel '{panel}' (scored: {scored})")
    episodes = run.episodes()
    if not episodes:
        raise ApplianceError(f"{run.where}: run '{run.run_id}' has no {run.scenario} episodes")
    messages = run.messages()
    scores = run.scores(panels=[panel])
    languages = sorted({str(e.metadata["language"]) for e in episodes if "language" in e.metadata})
    pooled = _board(run, panel, panels, episodes, messages, scores)
    if len(languages) == 1:
        return pooled.model_copy(update={"language": languages[0]})
    pooled.by_language = [
        _board(run, panel, panels, in_language, messages, scores).model_copy(update={"language": language})
        for language in languages
        if (in_language := [e for e in episodes if e.metadata.get("language") == language])
    ]
    return pooled


def _board(
    run: RunView,
    panel: str,
    panels: list[str],
    episodes: list[StoredEpisode],
    messages: list[StoredMessage],
    scores: list[StoredScore],
) -> PingPongLeaderboard:
    """One table over these episodes: their own length median, rows and calibrations."""
    ids = {episode.episode_id for episode in episodes}
    messages = [message for message in messages if message.episode_id in ids]
    scores = [score for score in scores if score.episode_id in ids]
    players = sorted({episode.player for episode in episodes})
    mean_lengths, median_of_means = reply_lengths(episodes, messages)
    judging = judging_mode(episodes)
    rating_scale = not judging.startswith("likelihood")
    rows = [
        _row(player, episodes, messages, scores, mean_lengths[player], median_of_means, rating_scale, seed=index)
        for index, player in enumerate(players)
    ]
    rows.sort(key=lambda row: -1.0 if row.ln_score is None else row.ln_score, reverse=True)
    calibration_ids: dict[str, set[str]] = {}
    for score in scores:
        if score.calibration_id is not None:
            calibration_ids.setdefault(score.metric, set()).add(score.calibration_id)
    return PingPongLeaderboard(
        run_id=run.run_id,
        scenario=run.scenario,
        panel=panel,
        status=run.status,
        median_of_mean_lengths=median_of_means,
        judging=judging,
        rows=rows,
        calibration=_describe_calibration(run, sorted(calibration_ids.get("final", ()))),
        criterion_calibrations={
            metric: described
            for metric in CALIBRATED_CRITERIA
            if (described := _describe_calibration(run, sorted(calibration_ids.get(metric, ())))) is not None
        },
        panels=panels,
    )


def _describe_calibration(run: RunView, ids: list[str]) -> dict[str, object] | None:
    if not ids:
        return None
    record = run.calibration(ids[-1])
    return {
        "calibration_id": record.calibration_id if len(ids) == 1 else ", ".join(ids),
        "label_set": record.label_set,
        "criterion": record.criterion,
        "template": record.template,
        "human_scale": record.model.get("human_scale"),
        "heldout_spearman": (record.metrics.get("panel_calibrated") or {}).get("spearman", {}).get("value"),
    }


def judging_mode(episodes: list[StoredEpisode]) -> str:
    """How the panel judged the run's conversations ("turn" for runs stored before the mode was recorded)."""
    return ", ".join(sorted({str(e.metadata["judging"]) for e in episodes if "judging" in e.metadata})) or "turn"


def reply_lengths(
    episodes: list[StoredEpisode], messages: list[StoredMessage]
) -> tuple[dict[str, float | None], float | None]:
    """Each model's mean player-reply length over its finished conversations, and the median of those means."""
    finished = {e.episode_id for e in episodes if e.finished}
    lengths: dict[str, list[float]] = {e.player: [] for e in episodes}
    for m in messages:
        if m.speaker == "player" and m.episode_id in finished:
            lengths.setdefault(m.player, []).append(float(len(m.text)))
    means = {player: mean(values) if values else None for player, values in lengths.items()}
    known = [value for value in means.values() if value is not None]
    return means, median(known) if known else None


def _row(
    player: str,
    episodes: list[StoredEpisode],
    messages: list[StoredMessage],
    scores: list[StoredScore],
    mean_length: float | None,
    median_of_means: float | None,
    rating_scale: bool,
    seed: int,
) -> PingPongRow:
    """`rating_scale`: the final is a 1-5 rating (sampled panel), so the length factor applies to it;
    otherwise it applies to the calibrated final only."""
    own_episodes = [e for e in episodes if e.player == player]
    per_episode, calibrated = _player_scores(player, scores)
    judged = {episode: metrics for episode, metrics in per_episode.items() if metrics.get("final") is not None}
    measured = {episode for episode, metrics in per_episode.items() if metrics.get("refusal") is not None}
    refused = {episode for episode in measured if per_episode[episode]["refusal"] == 1.0}

    def metric_values(metric: str) -> list[float]:  # a refused conversation counts where judges scored it
        return [v for metrics in judged.values() if (v := metrics.get(metric)) is not None]

    finals = metric_values("final")
    factor = length_factor(mean_length, median_of_means)
    criterion_means = {c: (mean(values) if (values := metric_values(c)) else None) for c in CRITERIA}
    kept_calibrated = {
        metric: [value for episode, value in by_episode.items() if episode in judged]
        for metric, by_episode in calibrated.items()
    }
    calibrated_final = kept_calibrated.get("final", [])
    normalised = [value * factor for value in (finals if rating_scale else calibrated_final)]
    return PingPongRow(
        model=player,
        episodes=len(own_episodes),
        failed_episodes=sum(1 for e in own_episodes if not e.finished),
        ended_early=sum(1 for e in own_episodes if e.finished and "ended_early" in e.metadata),
        judged_episodes=len(judged),
        in_character=criterion_means["in_character"],
        entertaining=criterion_means["entertaining"],
        fluent=criterion_means["fluent"],
        final=mean(finals) if finals else None,
        final_ci=bootstrap_interval(finals, seed=seed),
        refusal_ratio=len(refused) / len(measured) if measured else None,
        refused_episodes=len(refused),
        mean_length=mean_length,
        length_factor=factor,
        ln_score=mean(normalised) if normalised else None,
        ln_score_ci=bootstrap_interval(normalised, seed=seed),
        unparsed_verdicts=int(sum(v for m in per_episode.values() if (v := m.get("unparsed_verdicts")) is not None)),
        cut_replies=_cut(messages, player, "player"),
        cut_interrogator_messages=_cut(messages, player, "interrogator"),
        calibrated_final=mean(calibrated_final) if calibrated_final else None,
        calibrated_final_ci=bootstrap_interval(calibrated_final, seed=seed),
        calibrated_entertaining=_mean_or_none(kept_calibrated.get("entertaining")),
        calibrated_fluent=_mean_or_none(kept_calibrated.get("fluent")),
    )


def _player_scores(
    player: str, scores: list[StoredScore]
) -> tuple[dict[str, dict[str, float | None]], dict[str, dict[str, float]]]:
    """A player's scores by episode and metric, and its calibrated values by metric and episode."""
    per_episode: dict[str, dict[str, float | None]] = {}
    calibrated: dict[str, dict[str, float]] = {}
    for score in scores:
        if score.player == player:
            per_episode.setdefault(score.episode_id, {})[score.metric] = score.value
            if score.calibrated_value is not None:
                calibrated.setdefault(score.metric, {})[score.episode_id] = score.calibrated_value
    return per_episode, calibrated


def _cut(messages: list[StoredMessage], player: str, speaker: str) -> int:
    """How many of the player's conversations' messages by `speaker` stopped at their token cap."""
    return sum(1 for m in messages if m.player == player and m.speaker == speaker and m.finish_reason == "length")


def _mean_or_none(values: list[float] | None) -> float | None:
    return mean(values) if values else None
