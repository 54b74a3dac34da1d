"""The SimulateBench report of a stored run: consistency (CA) and robustness (RCoV) per model.

CA is computed on base profiles from the per-question verdicts (so its
interval resamples questions); RCoV per character is the coefficient of
variation of CA over the base profile and its variants, averaged over
characters, overall and per perturbed field. Profiles that did not fit a
model's context are counted, not scored.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean

import numpy as np
from pydantic import BaseModel

from appliance.errors import ApplianceError
from appliance.scenarios.simulatebench.metrics import consistency_accuracy, rcov
from appliance.scenarios.simulatebench.profile import PARTS
from appliance.stats import bootstrap_interval
from appliance.store import Store
from appliance.store.run_view import RunView, StoredEpisode

OVERFLOW_MARK = "does not fit the context"


class VariantResult(BaseModel):
    character: str
    variant: str
    field: str
    ca: float | None
    questions: int


class ConsistencyRow(BaseModel):
    model: str
    profiles: int
    not_fitting: int
    failed: int
    ca: float | None
    ca_ci: tuple[float, float] | None
    ca_by_part: dict[str, float | None]
    unparsed_answers: int
    rcov: float | None
    rcov_by_field: dict[str, float | None]
    variants: list[VariantResult]


class ConsistencyReport(BaseModel):
    run_id: str
    scenario: str
    status: str
    rows: list[ConsistencyRow]


def build_consistency_report(store: Store, run_id: str, scenario: str, panel: str | None = None) -> ConsistencyReport:
    """Rule-scored: `panel` is accepted for a uniform report signature and has no effect."""
    run = RunView(store, run_id, scenario)
    episodes = run.episodes()
    if not episodes:
        raise ApplianceError(f"{store.path}: run '{run_id}' has no {scenario} episodes")
    by_episode: dict[str, list[tuple[str, bool, bool, bool]]] = defaultdict(list)
    for verdict in run.verdicts(mode="choice"):
        part, _, kind = verdict.criterion.partition("/")
        by_episode[verdict.episode_id].append((part, kind == "answerable", bool(verdict.score), verdict.parsed))
    players = sorted({episode.player for episode in episodes})
    rows = [_row(player, episodes, by_episode, seed) for seed, player in enumerate(players)]
    return ConsistencyReport(run_id=run_id, scenario=scenario, status=run.status, rows=rows)


def _row(
    player: str,
    episodes: list[StoredEpisode],
    by_episode: dict[str, list[tuple[str, bool, bool, bool]]],
    seed: int,
) -> ConsistencyRow:
    own = [e for e in episodes if e.player == player]
    not_fitting = sum(1 for e in own if not e.finished and OVERFLOW_MARK in (e.error or ""))
    failed = sum(1 for e in own if not e.finished) - not_fitting
    variants: list[VariantResult] = []
    base_questions: list[tuple[str, bool, bool]] = []
    unparsed = 0
    for episode in own:
        if not episode.finished:
            continue
        episode_id, info = episode.episode_id, episode.metadata
        results = by_episode.get(episode_id, [])
        unparsed += sum(1 for *_, parsed in results if not parsed)
        variant = str(info.get("variant", "base"))
        variants.append(
            VariantResult(
                character=str(info.get("character", episode_id)),
                variant=variant,
                field=str(info.get("field", variant)),
                ca=consistency_accuracy([(answerable, correct) for _, answerable, correct, _ in results]),
                questions=len(results),
            )
        )
        if variant == "base":
            base_questions.extend((part, answerable, correct) for part, answerable, correct, _ in results)

    def ca_of(rows: list[tuple[str, bool, bool]]) -> float | None:
        return consistency_accuracy([(answerable, correct) for _, answerable, correct in rows])

    answerable = np.asarray([a for _, a, _ in base_questions], dtype=bool)
    correct = np.asarray([c for _, _, c in base_questions], dtype=float)
    encoded = np.where(answerable, 2.0, 0.0) + correct  # one column carries both flags through the resampling
    interval = bootstrap_interval(
        encoded.tolist(),
        lambda sample: consistency_accuracy([(v >= 2.0, v % 2.0 == 1.0) for v in sample]) or 0.0,
        resamples=1000,
        seed=seed,
    )
    return ConsistencyRow(
        model=player,
        profiles=len(own),
        not_fitting=not_fitting,
        failed=failed,
        ca=ca_of(base_questions),
        ca_ci=interval,
        ca_by_part={part: ca_of([q for q in base_questions if q[0] == part]) for part in PARTS},
        unparsed_answers=unparsed,
        rcov=_mean_rcov(variants, None),
        rcov_by_field={f: _mean_rcov(variants, f) for f in sorted({v.field for v in variants} - {"base"})},
        variants=variants,
    )


def _mean_rcov(variants: list[VariantResult], field: str | None) -> float | None:
    """Mean over characters of the RCoV of CA across the base profile and the (chosen field's) variants."""
    groups: dict[str, list[float]] = defaultdict(list)
    for v in variants:
        if v.ca is not None and (field is None or v.field in (field, "base")):
            groups[v.character].append(v.ca)
    values = [value for cas in groups.values() if (value := rcov(cas)) is not None]
    return fmean(values) if values else None
