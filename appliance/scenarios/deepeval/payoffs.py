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

from appliance.scenarios.base import RULE_SCORER
from appliance.scenarios.deepeval.settings import Repetitions
from appliance.scenarios.deepeval.tasks import TaskSpec
from appliance.stats import bootstrap_interval
from appliance.store.records import ScoreRecord
from appliance.store.run_view import RunView

#: (task, model, role) -> the payoffs of that model in that role, one per episode
PayoffSamples = dict[tuple[str, str, str], list[float]]


def seat_scores(models: Mapping[str, str], values: Mapping[str, float], metric: str) -> list[ScoreRecord]:
    """A symmetric task's per-seat values (`models`: seat -> model) as one score per model: the mean over its seats."""
    by_model: dict[str, list[float]] = defaultdict(list)
    for seat, value in values.items():
        by_model[models[seat]].append(float(value))
    return [ScoreRecord(panel=RULE_SCORER, player=m, metric=metric, value=mean(v)) for m, v in by_model.items()]


def task_of(instance_id: str) -> str:
    return instance_id.split("/", 1)[0]


def metric_samples(run: RunView, panel: str) -> dict[tuple[str, str, str], list[float]]:
    """(task, model, metric) -> values, one per finished episode, from rules and from `panel`."""
    samples: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for score in run.scores(panels=[RULE_SCORER, panel]):
        if score.value is not None:
            samples[(task_of(score.instance_id), score.player, score.metric)].append(score.value)
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
