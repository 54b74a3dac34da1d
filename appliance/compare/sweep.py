"""A checkpoint sweep against its base: one comparison over every checkpoint, and the curve to draw.

A sweep's players carry their sweep and training step in the models a run recorded (the catalog sets
them when it expands `adapters = "GLOB"`), so a sweep is grouped and ordered from the store, never
from its players' names.

Each checkpoint is paired with the base on the units both played and each headline metric is tested
as `compare` tests one pair (paired bootstrap interval, sign-flip p-values). Holm's adjustment runs
across all checkpoints and metrics together, once per direction, so the chance that any checkpoint is
wrongly called better than the base (or wrongly called a regression) stays at most alpha however many
checkpoints the sweep has; one `compare` per checkpoint would multiply it by up to their number.

The gate (exit 1) watches one checkpoint: the last by default (the newest, what a training run hands
on), or the one `checkpoint` names. Not the best one: it is picked by the very numbers it would be
tested on, so it looks better than it is, and it is the least likely place to find a regression.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pydantic import BaseModel, ConfigDict, computed_field

from appliance.compare.gate import (
    DEFAULT_ALPHA,
    IMPROVEMENT,
    Comparison,
    MetricComparison,
    Thresholds,
    checked_differences,
    compare_players,
    concluded,
    shared_headlines,
)
from appliance.errors import ApplianceError
from appliance.headline import Estimate, Headline, estimate
from appliance.scenario_spec import family_of
from appliance.store import Store


class SweepPlayers(BaseModel):
    """The players of one sweep in a run: its base and its checkpoints in step order."""

    model_config = ConfigDict(frozen=True)

    name: str
    base: str
    #: (player, training step), in step order
    checkpoints: tuple[tuple[str, int], ...]

    @property
    def players(self) -> list[str]:
        return [player for player, _ in self.checkpoints]


def stored_sweeps(store: Store, run_id: str) -> list[SweepPlayers]:
    """The sweeps whose checkpoints played in the run, read from the models the run recorded."""
    played = set(store.episode_players(run_id))
    members: dict[str, list[tuple[str, int]]] = defaultdict(list)
    bases: dict[str, str] = {}
    for model in store.run_models(run_id):
        sweep = model.parameters.get("sweep")
        if sweep and model.name in played:
            members[sweep].append((model.name, int(model.parameters["step"])))
            bases[sweep] = str(model.parameters["base"])
    return [
        SweepPlayers(name=name, base=bases[name], checkpoints=tuple(sorted(found, key=lambda member: member[1])))
        for name, found in sorted(members.items())
    ]


def find_sweep(store: Store, run_id: str, name: str | None) -> SweepPlayers:
    """The run's sweep called `name`, or its only sweep when `name` is None."""
    sweeps = stored_sweeps(store, run_id)
    known = ", ".join(sweep.name for sweep in sweeps) or "none"
    if name is None:
        if len(sweeps) == 1:
            return sweeps[0]
        raise ApplianceError(
            f"run '{run_id}' played no sweep (an entry with `adapters = ...` in --players)"
            if not sweeps
            else f"run '{run_id}' played {len(sweeps)} sweeps ({known}): name one with --sweep"
        )
    for sweep in sweeps:
        if sweep.name == name:
            return sweep
    raise ApplianceError(f"--sweep: run '{run_id}' played no sweep '{name}' (its sweeps: {known})")


def gated_checkpoint(sweep: SweepPlayers, chosen: str | None) -> str:
    """The checkpoint the gate watches: `chosen` as a player name, a checkpoint folder or a step; else the last."""
    if chosen is None:
        return sweep.checkpoints[-1][0]
    for player, step in sweep.checkpoints:
        if chosen in (player, player.partition("@")[2], str(step)):
            return player
    steps = ", ".join(str(step) for _, step in sweep.checkpoints)
    raise ApplianceError(f"--checkpoint: '{chosen}' is no checkpoint of sweep '{sweep.name}' (steps: {steps})")


class SweepPoint(BaseModel):
    player: str
    step: int
    estimate: Estimate
    #: this checkpoint against the base on their shared units (difference, interval, Holm verdict)
    against_base: MetricComparison


class SweepCurve(BaseModel):
    """One headline metric of one family along the sweep."""

    family: str
    scenario: str
    metric: str
    description: str
    higher_is_better: bool
    base: Estimate
    points: list[SweepPoint]

    @property
    def best(self) -> SweepPoint | None:
        """The checkpoint with the best value (the earliest where several tie); None where all are equal."""
        known = [point for point in self.points if point.estimate.value is not None]
        if len({point.estimate.value for point in known}) < min(2, len(self.points)) or not known:
            return None
        sign = 1.0 if self.higher_is_better else -1.0
        return max(known, key=lambda point: (sign * (point.estimate.value or 0.0), -point.step))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def best_checkpoint(self) -> str | None:
        """The player `best` names, in the JSON too (the tables mark it "(best)")."""
        best = self.best
        return None if best is None else best.player


class SweepResult(BaseModel):
    sweep: SweepPlayers
    #: every checkpoint against the base, metric by metric; Holm across all of them
    comparison: Comparison
    curves: list[SweepCurve]
    #: the checkpoint whose regression fails the gate
    gated: str

    @property
    def gate_regressions(self) -> list[MetricComparison]:
        return [m for m in self.comparison.metrics if m.candidate_player == self.gated and m.regression]

    def verdict_players(self, verdict: str) -> dict[str, list[str]]:
        """Checkpoint -> the `family.metric`s with that verdict, in step order."""
        found: dict[str, list[str]] = {player: [] for player in self.sweep.players}
        for m in self.comparison.metrics:
            if m.verdict == verdict:
                found[m.candidate_player].append(f"{m.family}.{m.metric}")
        return {player: metrics for player, metrics in found.items() if metrics}

    @property
    def better(self) -> dict[str, list[str]]:
        """The checkpoints better than the base, at the family-wise error rate alpha."""
        return self.verdict_players(IMPROVEMENT)

    def of_scenario(self, scenario: str) -> SweepResult:
        """The sweep as one scenario of the run sees it: its curves and its rows of the comparison. The
        p-values and verdicts stay the whole sweep's (Holm ran across every family's metrics at once)."""
        curves = [curve for curve in self.curves if curve.scenario == scenario]
        rows = {(curve.family, curve.metric, point.player) for curve in curves for point in curve.points}
        metrics = [m for m in self.comparison.metrics if (m.family, m.metric, m.candidate_player) in rows]
        comparison = self.comparison.model_copy(update={"metrics": metrics})
        return self.model_copy(update={"comparison": comparison, "curves": curves})

    def as_json(self, *, holm_tests: int | None = None) -> dict[str, Any]:
        """What `compare --sweep --json` prints, and `report --json` beside each scenario's report: the
        sweep, every test, its curves, the gate's regressions, the checkpoints better than the base, and
        how many tests Holm's adjustment ran across (`holm_tests`: the whole sweep's, where this is a part)."""
        return self.model_dump(mode="json") | {
            "regressions": len(self.gate_regressions),
            "better": self.better,
            "holm_tests": len(self.comparison.metrics) if holm_tests is None else holm_tests,
        }


def compare_sweep(
    store: Store,
    base_run: str,
    candidate_run: str,
    sweep_name: str | None,
    thresholds: Thresholds,
    *,
    checkpoint: str | None = None,
    force: bool = False,
    resamples: int = 2000,
    seed: int = 0,
    alpha: float = DEFAULT_ALPHA,
) -> SweepResult:
    """The sweep of `candidate_run` against its base as played in `base_run` (often the same run)."""
    if not 0.0 < alpha < 1.0:
        raise ApplianceError(f"--alpha: {alpha} is not between 0 and 1")
    sweep = find_sweep(store, candidate_run, sweep_name)
    if sweep.base not in store.episode_players(base_run):
        raise ApplianceError(
            f"run '{base_run}' did not play the sweep's base '{sweep.base}': play it beside the checkpoints "
            f"(--players {sweep.base},{sweep.name}) or name the run that did as BASE"
        )
    gated = gated_checkpoint(sweep, checkpoint)
    headlines = _headlines(store, base_run, candidate_run)
    differences = checked_differences(store, base_run, candidate_run, headlines, force=force)
    metrics: list[MetricComparison] = []
    for scenario, base, candidate in headlines:
        for player in sweep.players:
            if any(unit.player == player for unit in candidate.units):
                metrics += compare_players(
                    scenario, base, candidate, sweep.base, player, thresholds, resamples, seed, alpha
                )
    if not metrics:
        raise ApplianceError(f"sweep '{sweep.name}' shares no family with headline metrics with its base")
    comparison = concluded(base_run, candidate_run, metrics, thresholds, alpha, force=force, differences=differences)
    curves = [
        curve
        for scenario, base, candidate in headlines
        for curve in _curves(scenario, base, candidate, sweep, metrics, seed)
    ]
    return SweepResult(sweep=sweep, comparison=comparison, curves=curves, gated=gated)


def _headlines(store: Store, base_run: str, candidate_run: str) -> list[tuple[str, Headline, Headline]]:
    if base_run != candidate_run:
        return shared_headlines(store, base_run, candidate_run)
    return [(scenario, headline, headline) for scenario, headline, _ in shared_headlines(store, base_run, base_run)]


def _curves(
    scenario: str,
    base: Headline,
    candidate: Headline,
    sweep: SweepPlayers,
    metrics: list[MetricComparison],
    seed: int,
) -> list[SweepCurve]:
    family = family_of(scenario)
    rows = {(m.metric, m.candidate_player): m for m in metrics if m.family == family}
    base_units = [unit for unit in base.units if unit.player == sweep.base]
    curves = []
    for metric in base.metrics:
        points = [
            SweepPoint(
                player=player,
                step=step,
                estimate=estimate(
                    player, [unit for unit in candidate.units if unit.player == player], metric.statistic, seed
                ),
                against_base=rows[(metric.name, player)],
            )
            for player, step in sweep.checkpoints
            if (metric.name, player) in rows
        ]
        curves.append(
            SweepCurve(
                family=family,
                scenario=scenario,
                metric=metric.name,
                description=metric.description,
                higher_is_better=metric.higher_is_better,
                base=estimate(sweep.base, base_units, metric.statistic, seed),
                points=points,
            )
        )
    return curves


def run_sweep_results(store: Store, run_id: str, *, seed: int = 0) -> tuple[list[SweepResult], list[str]]:
    """Every sweep of a run against its base in the same run, for `report` and the page; and a note for
    each sweep whose base did not play beside it (nothing to pair its checkpoints with)."""
    results, notes = [], []
    played = set(store.episode_players(run_id))
    for sweep in stored_sweeps(store, run_id):
        if sweep.base not in played:
            notes.append(
                f"Sweep {sweep.name}: its base {sweep.base} did not play in this run, so its checkpoints have "
                f"nothing to be compared with (--players {sweep.base},{sweep.name})."
            )
            continue
        try:
            results.append(compare_sweep(store, run_id, run_id, sweep.name, Thresholds(), seed=seed))
        except ApplianceError as error:
            notes.append(f"Sweep {sweep.name}: {error}")
    return results, notes
