"""The SimulateBench report of a stored run: consistency (CA) and robustness (RCoV) per model.

CA is the authors' weighted accuracy (`metrics.consistency_accuracy`), computed
per character on its base profile and then averaged over characters; its
interval resamples characters. RCoV is reported per perturbed field, never
pooled: for each character, std (ddof 1) / mean x 100 of CA over the base
profile and the variants of that field, then averaged over characters.
Profiles that did not fit a model's context are counted, not scored.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import fmean, median

from pydantic import BaseModel

from appliance.engine.backend import did_not_fit
from appliance.errors import ApplianceError
from appliance.scenarios.simulatebench.metrics import QuestionResult, consistency_accuracy, rcov
from appliance.scenarios.simulatebench.profile import PARTS
from appliance.store.run_view import RunView, StoredEpisode
from appliance.util.stats import bootstrap_interval

#: how a free-text answer was judged right: our option parser, or the authors' containment test (imports)
OPTION_PARSER = "option parser"


class VariantResult(BaseModel):
    character: str
    variant: str
    field: str
    ca: float | None
    questions: int


class ConsistencyRow(BaseModel):
    model: str
    profiles: int
    characters: int
    not_fitting: int
    failed: int
    #: mean over characters of each character's base-profile CA
    ca: float | None
    ca_ci: tuple[float, float] | None
    ca_by_part: dict[str, float | None]
    unparsed_answers: int
    #: RCoV (%) per perturbed field, averaged over characters
    rcov_by_field: dict[str, float | None]
    variants: list[VariantResult]
    #: the run's size beside the paper's (about 3,277-token profiles, about 150 questions, RCoV over 6-21
    #: values): mean questions per base profile, median tokens the player read for its shortest question
    #: (profile + prompt; None for imported answers), and the most CA values one field's RCoV is over
    questions_per_character: float | None = None
    profile_tokens: int | None = None
    rcov_values: int | None = None


class ConsistencyReport(BaseModel):
    run_id: str
    scenario: str
    status: str
    answer_test: str
    rows: list[ConsistencyRow]


def build_consistency_report(run: RunView, panel: str | None = None) -> ConsistencyReport:
    """Rule-scored: `panel` is accepted for a uniform report signature and has no effect."""
    episodes = run.episodes()
    if not episodes:
        raise ApplianceError(f"{run.where}: run '{run.run_id}' has no {run.scenario} episodes")
    by_episode: dict[str, list[tuple[str, bool, bool, bool]]] = defaultdict(list)
    for verdict in run.verdicts(mode="choice"):
        part, _, kind = verdict.criterion.partition("/")
        by_episode[verdict.episode_id].append((part, kind == "answerable", bool(verdict.score), verdict.parsed))
    players = sorted({episode.player for episode in episodes})
    answer_tests = sorted({str(e.metadata.get("answer_test", OPTION_PARSER)) for e in episodes})
    shortest_prompt: dict[str, int] = {}  # episode -> the fewest tokens the player read for one question
    for message in run.messages(speaker="player"):
        if message.prompt_tokens:
            known = shortest_prompt.get(message.episode_id, message.prompt_tokens)
            shortest_prompt[message.episode_id] = min(known, message.prompt_tokens)
    rows = [_row(player, episodes, by_episode, seed, shortest_prompt) for seed, player in enumerate(players)]
    return ConsistencyReport(
        run_id=run.run_id, scenario=run.scenario, status=run.status, answer_test=", ".join(answer_tests), rows=rows
    )


def _row(
    player: str,
    episodes: list[StoredEpisode],
    by_episode: dict[str, list[tuple[str, bool, bool, bool]]],
    seed: int,
    shortest_prompt: dict[str, int],
) -> ConsistencyRow:
    own = [e for e in episodes if e.player == player]
    not_fitting = sum(1 for e in own if not e.finished and did_not_fit(e.error))
    failed = sum(1 for e in own if not e.finished) - not_fitting
    variants, base_results, base_tokens, unparsed = _results(own, by_episode, shortest_prompt)
    fields = sorted({v.field for v in variants} - {"base"})
    per_character = [ca for results in base_results.values() if (ca := consistency_accuracy(results)) is not None]
    return ConsistencyRow(
        model=player,
        profiles=len(own),
        characters=len(base_results),
        not_fitting=not_fitting,
        failed=failed,
        ca=fmean(per_character) if per_character else None,
        ca_ci=bootstrap_interval(per_character, seed=seed) if len(per_character) > 1 else None,
        ca_by_part=_ca_by_part(base_results),
        unparsed_answers=unparsed,
        rcov_by_field={f: field_rcov(variants, f) for f in fields},
        variants=variants,
        questions_per_character=fmean(len(q) for q in base_results.values()) if base_results else None,
        profile_tokens=int(median(base_tokens)) if base_tokens else None,
        rcov_values=_rcov_values(variants, fields),
    )


def _results(
    own: list[StoredEpisode], by_episode: dict[str, list[tuple[str, bool, bool, bool]]], shortest_prompt: dict[str, int]
) -> tuple[list[VariantResult], dict[str, list[QuestionResult]], list[int], int]:
    """Per finished profile episode: its variant's CA; the base profiles' answers by character, their prompt
    tokens, and the answers that did not parse."""
    variants: list[VariantResult] = []
    base_results: dict[str, list[QuestionResult]] = {}
    base_tokens: list[int] = []
    unparsed = 0
    for episode in own:
        if not episode.finished:
            continue
        results = by_episode.get(episode.episode_id, [])
        unparsed += sum(1 for *_, parsed in results if not parsed)
        questions = [(part, answerable, correct) for part, answerable, correct, _ in results]
        character = str(episode.metadata.get("character", episode.episode_id))
        variant = str(episode.metadata.get("variant", "base"))
        variants.append(
            VariantResult(
                character=character,
                variant=variant,
                field=str(episode.metadata.get("field", variant)),
                ca=consistency_accuracy(questions),
                questions=len(questions),
            )
        )
        if variant == "base":
            base_results[character] = questions
            if episode.episode_id in shortest_prompt:
                base_tokens.append(shortest_prompt[episode.episode_id])
    return variants, base_results, base_tokens, unparsed


def _ca_by_part(base_results: dict[str, list[QuestionResult]]) -> dict[str, float | None]:
    """Mean CA over characters of each part of the questions (a character counts where it has that part)."""
    by_part: dict[str, float | None] = {}
    for part in PARTS:
        values = [
            ca
            for results in base_results.values()
            if (ca := consistency_accuracy([q for q in results if q[0] == part])) is not None
        ]
        by_part[part] = fmean(values) if values else None
    return by_part


def _rcov_values(variants: list[VariantResult], fields: list[str]) -> int | None:
    """The most variants (the base included) any character has for one field: how many values RCoV spreads over."""
    return max(
        (Counter(v.character for v in variants if v.field in (f, "base")).most_common(1)[0][1] for f in fields),
        default=None,
    )


def field_rcov(variants: list[VariantResult], field: str) -> float | None:
    """Mean over characters of the RCoV of CA across the base profile and that field's variants."""
    groups: dict[str, list[float]] = defaultdict(list)
    for v in variants:
        if v.ca is not None and v.field in (field, "base"):
            groups[v.character].append(v.ca)
    values = [value for cas in groups.values() if (value := rcov(cas)) is not None]
    return fmean(values) if values else None
