"""Payoffs per model (and role) from stored scores, and DeepEval's stableness rule.

A task is repeated until every payoff mean of it is stable: its interval
(`confidence`) is no wider than `tolerance` x the payoff's range on either
side. The interval fits the payoff's kind: a bootstrap interval of the mean
for amounts (coins, ratings), a Wilson score interval for outcomes in 0..1
(win/draw/loss points), so that three identical wins are not
"stable" the way a bootstrap of identical values would say. Both the runner
(deciding whether to play more repetitions) and the report read payoffs the
same way, here.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist, mean

from appliance.scenarios.base import RULE_SCORER
from appliance.scenarios.deepeval.settings import Repetitions
from appliance.scenarios.deepeval.tasks import Payoff, TaskSpec
from appliance.store.records import ScoreRecord
from appliance.store.run_view import RunView
from appliance.util.stats import bootstrap_interval

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
            for role, payoff in spec.payoffs.items():
                if task == spec.id and metric == payoff.metric:
                    payoffs[(task, model, role)] = list(values)
    return payoffs


def wilson_interval(values: list[float], confidence: float) -> tuple[float, float]:
    """The Wilson score interval of a proportion whose estimate is the mean of `values` (each in 0..1)."""
    n = len(values)
    share = mean(values)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def payoff_interval(values: list[float], payoff: Payoff, confidence: float) -> tuple[float, float] | None:
    """The interval the stableness rule reads: Wilson for outcomes, bootstrap for amounts (None below 2 values)."""
    if len(values) < 2:
        return None
    if payoff.kind == "outcome":
        return wilson_interval(values, confidence)
    return bootstrap_interval(values, confidence=confidence)


@dataclass(frozen=True)
class Stability:
    interval: tuple[float, float] | None
    #: the widest half-width the rule allows: tolerance x range
    limit: float

    @property
    def half_width(self) -> float | None:
        return None if self.interval is None else (self.interval[1] - self.interval[0]) / 2

    @property
    def stable(self) -> bool:
        return self.half_width is not None and self.half_width <= self.limit


def stability(values: list[float], payoff: Payoff, rule: Repetitions) -> Stability:
    return Stability(payoff_interval(values, payoff, rule.confidence), rule.tolerance * payoff.range)


def task_is_stable(task: TaskSpec, payoffs: PayoffSamples, rule: Repetitions) -> bool:
    """Every (model, role) payoff of `task` is stable; a task with no payoffs yet is not."""
    cells = [(values, task.payoffs[role]) for (name, _, role), values in payoffs.items() if name == task.id]
    return bool(cells) and all(stability(values, payoff, rule).stable for values, payoff in cells)
