"""Payoffs per model (and role) from stored scores, and DeepEval's stableness rule.

A task is repeated until every payoff mean of it is stable: the bootstrap
interval of the mean is no wider than `tolerance` x the task's payoff range
on either side. Both the runner (deciding whether to play more repetitions)
and the report read payoffs the same way, here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from statistics import mean

from appliance.report.bootstrap import bootstrap_interval
from appliance.scenarios.base import RULES_PANEL
from appliance.scenarios.deepeval.settings import Repetitions
from appliance.scenarios.deepeval.tasks import TaskSpec
from appliance.store import Store
from appliance.store.records import ScoreRecord

#: (task, model, role) -> the payoffs of that model in that role, one per episode
PayoffSamples = dict[tuple[str, str, str], list[float]]


def seat_scores(models: Mapping[str, str], values: Mapping[str, float], metric: str) -> list[ScoreRecord]:
    """A symmetric task's per-seat values (`models`: seat -> model) as one score per model: the mean over its seats."""
    by_model: dict[str, list[float]] = defaultdict(list)
    for seat, value in values.items():
        by_model[models[seat]].append(float(value))
    return [ScoreRecord(panel=RULES_PANEL, player=m, metric=metric, value=mean(v)) for m, v in by_model.items()]


def task_of(instance_id: str) -> str:
    return instance_id.split("/", 1)[0]


def metric_samples(store: Store, run_id: str, scenario: str, panel: str) -> dict[tuple[str, str, str], list[float]]:
    """(task, model, metric) -> values, one per finished episode, from rules and from `panel`."""
    rows = store.query(
        "SELECT e.instance_id, s.player, s.metric, s.value FROM scores s JOIN episodes e USING (episode_id) "
        "WHERE e.run_id = ? AND e.scenario = ? AND e.status = 'finished' AND s.panel IN (?, ?) "
        "AND s.value IS NOT NULL ORDER BY e.instance_id, e.episode_id",
        [run_id, scenario, RULES_PANEL, panel],
    )
    samples: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for instance_id, model, metric, value in rows:
        samples[(task_of(str(instance_id)), str(model), str(metric))].append(float(value))
    return samples


def payoff_samples(samples: Mapping[tuple[str, str, str], list[float]], specs: list[TaskSpec]) -> PayoffSamples:
    payoffs: PayoffSamples = {}
    for spec in specs:
        for (task, model, metric), values in samples.items():
            for role, payoff_metric in spec.payoffs.items():
                if task == spec.id and metric == payoff_metric:
                    payoffs[(task, model, role)] = list(values)
    return payoffs


def interval(values: list[float], confidence: float) -> tuple[float, float] | None:
    return bootstrap_interval(values, confidence=confidence) if len(values) >= 2 else None


def within_tolerance(bounds: tuple[float, float] | None, payoff_range: float, rule: Repetitions) -> bool:
    """A mean is stable when its interval's half-width is at most `tolerance` x the payoff range."""
    return bounds is not None and (bounds[1] - bounds[0]) / 2 <= rule.tolerance * payoff_range


def task_is_stable(task: TaskSpec, payoffs: PayoffSamples, rule: Repetitions) -> bool:
    """Every (model, role) payoff of `task` is stable; a task with no payoffs yet is not."""
    cells = [values for (name, _, _), values in payoffs.items() if name == task.id]
    return bool(cells) and all(
        within_tolerance(interval(values, rule.confidence), task.payoff_range, rule) for values in cells
    )
