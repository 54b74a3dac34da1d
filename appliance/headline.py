"""What a family offers `appliance compare`: its headline metrics over pairable units.

A unit is the smallest thing two runs can share: an instance played by one player (a PingPong
conversation, a clembench episode, a SimulBench script), or a character for SimulateBench. Its key
is the same in any run that played the same instance, so a base run and a candidate run are paired
unit by unit. A metric is a statistic over a list of units (a mean, or clembench's clemscore), so
a paired bootstrap can recompute it on resampled units of both runs at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean

import numpy as np


@dataclass(frozen=True)
class Unit:
    #: what pairs the unit across runs (an instance id, a script id, a character)
    key: str
    #: the player label whose unit this is (a model name, or "A--B" in cross-play)
    player: str
    values: Mapping[str, float | None]
    #: a grouping some statistics need (clembench's game), and the page's per-group view (PingPong's language)
    group: str = ""


Statistic = Callable[[Sequence[Unit]], float | None]


@dataclass(frozen=True)
class HeadlineMetric:
    name: str
    statistic: Statistic
    higher_is_better: bool = True
    #: what the number means, shown beside it
    description: str = ""
    #: the stored score metric whose panel verdicts make this figure (None: the rules compute it); a judged
    #: figure's report names the calibration behind it and says when the panel did not separate the players
    judged_by: str | None = None


@dataclass(frozen=True)
class WithinRun:
    """A figure that ranks the players of one run against each other (a pairwise preference), with its own
    units: `compare` does not pair it across runs, but its evidence is reported like a metric's."""

    metric: HeadlineMetric
    units: list[Unit]


@dataclass(frozen=True)
class Headline:
    units: list[Unit]
    metrics: list[HeadlineMetric]
    #: facts about how the figures were made that must match for a comparison (e.g. the judging mode)
    settings: dict[str, str] = field(default_factory=dict)
    within_run: list[WithinRun] = field(default_factory=list)


def mean_of(value: str) -> Statistic:
    """The mean of one value over the units that have it (None where none has)."""

    def statistic(units: Sequence[Unit]) -> float | None:
        known = [v for unit in units if (v := unit.values.get(value)) is not None]
        return fmean(known) if known else None

    return statistic


@dataclass(frozen=True)
class Estimate:
    """A statistic of one player's units with its 95% bootstrap interval over those units."""

    label: str
    value: float | None
    ci: tuple[float, float] | None
    n: int


def estimate(label: str, units: Sequence[Unit], statistic: Statistic, seed: int, resamples: int = 1000) -> Estimate:
    """The statistic over the units that carry it (a DeepEval unit has only its own task's payoff),
    with a bootstrap interval over those units."""
    units = [unit for unit in units if statistic([unit]) is not None]
    value = statistic(units) if units else None
    if value is None or len(units) < 2:
        return Estimate(label, value, None, len(units))
    rng = np.random.default_rng(seed)
    estimates = []
    for _ in range(resamples):
        drawn = rng.integers(0, len(units), len(units))
        resampled = statistic([units[i] for i in drawn])
        if resampled is not None:
            estimates.append(resampled)
    if not estimates:
        return Estimate(label, value, None, len(units))
    low, high = np.quantile(np.asarray(estimates), [0.025, 0.975])
    return Estimate(label, value, (float(low), float(high)), len(units))
