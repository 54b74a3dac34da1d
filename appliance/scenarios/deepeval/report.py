"""The DeepEval report: payoff tables, per model for symmetric tasks and per model and role for
asymmetric ones, each mean with a bootstrap interval and its number of episodes, plus how many
repetitions each task needed and whether its means are stable."""

from __future__ import annotations

from collections import defaultdict
from statistics import mean
from typing import Literal

from pydantic import BaseModel

from appliance.scenarios.deepeval.family import DeepEvalData, DeepEvalFamily
from appliance.scenarios.deepeval.payoffs import (
    interval,
    metric_samples,
    payoff_samples,
    task_of,
    within_tolerance,
)
from appliance.scenarios.registry import load_family
from appliance.store import Store
from appliance.store.run_view import RunView


class PayoffCell(BaseModel):
    mean: float | None
    ci: tuple[float, float] | None
    n: int
    stable: bool


class PayoffRow(BaseModel):
    task: str
    title: str
    model: str
    #: "player" in symmetric tasks; the role (programmer, reviewer, ...) in asymmetric ones
    role: str
    payoff: PayoffCell
    #: further per-episode means, e.g. rule violations, valid moves, the judges' rating of the code
    extras: dict[str, float | None]


class TaskRepetitions(BaseModel):
    task: str
    repetitions: int
    episodes: int
    failed: int
    stable: bool


class DeepEvalReport(BaseModel):
    kind: Literal["deepeval"] = "deepeval"
    run_id: str
    scenario: str
    status: str
    panel: str
    symmetric: list[PayoffRow]
    asymmetric: list[PayoffRow]
    repetitions: list[TaskRepetitions]
    #: judges of the panel that are also players in the run: their ratings include their own outputs
    self_judging: list[str] = []
    #: the panel's ratings that did not parse (left out of the means)
    unparsed_ratings: int = 0
    #: the stableness rule the run used
    tolerance: float
    confidence: float


def build_deepeval_report(store: Store, run_id: str, scenario: str, panel: str | None = None) -> DeepEvalReport:
    run = RunView(store, run_id, scenario)
    panel_name = panel or run.panel
    family = load_family(scenario, seed=int(run.config["seed"]))
    assert isinstance(family, DeepEvalFamily)
    data = family.data
    rule = data.settings.repetitions
    samples = metric_samples(run, panel_name)
    payoffs = payoff_samples(samples, data.specs)
    rows: list[PayoffRow] = []
    for spec in data.specs:
        for (task, model, role), values in sorted(payoffs.items()):
            if task != spec.id:
                continue
            bounds = interval(values, rule.confidence)
            extras = {metric: _mean(samples.get((task, model, metric), [])) for metric in spec.extras.get(role, ())}
            stable = within_tolerance(bounds, spec.payoff_range, rule)
            cell = PayoffCell(mean=_mean(values), ci=bounds, n=len(values), stable=stable)
            rows.append(PayoffRow(task=task, title=spec.title, model=model, role=role, payoff=cell, extras=extras))
    symmetric_tasks = {spec.id for spec in data.specs if spec.symmetric}
    return DeepEvalReport(
        run_id=run_id,
        scenario=scenario,
        status=run.status,
        panel=panel_name,
        symmetric=[row for row in rows if row.task in symmetric_tasks],
        asymmetric=[row for row in rows if row.task not in symmetric_tasks],
        repetitions=_repetitions(run, rows, data),
        self_judging=_self_judging(run, panel_name),
        unparsed_ratings=sum(1 for v in run.verdicts() if v.panel == panel_name and not v.parsed),
        tolerance=rule.tolerance,
        confidence=rule.confidence,
    )


def _self_judging(run: RunView, panel: str) -> list[str]:
    """The run's players that also judge in its panel (known for the panel the run was played with)."""
    config_panel = run.config.get("panel", {})
    if config_panel.get("name") != panel:
        return []
    return sorted(set(config_panel.get("judges", [])) & set(run.config.get("players", [])))


def _mean(values: list[float]) -> float | None:
    return mean(values) if values else None


def _repetitions(run: RunView, rows: list[PayoffRow], data: DeepEvalData) -> list[TaskRepetitions]:
    """Per task: repetitions and episodes played, and stable when every payoff row of it is."""
    repetitions: dict[str, set[str]] = defaultdict(set)
    episodes: dict[str, int] = defaultdict(int)
    failed: dict[str, int] = defaultdict(int)
    for episode in run.episodes():
        task = task_of(episode.instance_id)
        repetitions[task].add(episode.instance_id)
        episodes[task] += 1
        failed[task] += not episode.finished
    return [
        TaskRepetitions(
            task=task,
            repetitions=len(repetitions[task]),
            episodes=episodes[task],
            failed=failed[task],
            stable=any(row.task == task for row in rows) and all(row.payoff.stable for row in rows if row.task == task),
        )
        for task in (spec.id for spec in data.specs)
        if episodes[task]
    ]
