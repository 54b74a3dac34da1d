"""Paired differences of a statistic between two runs: a bootstrap interval and a sign-flip test.

Pairing removes what the two runs share (the instance's difficulty), so the interval of the
difference is much narrower than two independent intervals would suggest.

The interval comes from the paired bootstrap (resample shared units, recompute the statistic on both
runs). The p-values come from a sign-flip test instead: each unit's two results are swapped between
the runs at random, and the statistic's difference recomputed. When the two runs are the same model
sampled twice, every swap is as likely as the observed arrangement, so the test's false alarms are at
most its level for any statistic and any number of units, where the bootstrap's are not: with 16
PingPong conversations and a rare event such as a refusal it alarmed well above its level
(docs/regression.md). The price is honesty about small samples: n units cannot give a p-value below
2^-n.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from appliance.headline import Statistic, Unit


@dataclass(frozen=True)
class PairedDifference:
    base: float | None
    candidate: float | None
    delta: float | None
    ci: tuple[float, float] | None
    pairs: int
    #: the differences under random swaps of each unit's two results (empty where none could be made)
    null_draws: tuple[float, ...] = ()

    def p_below(self, bound: float) -> float | None:
        """One-sided p-value against "the difference is at least `bound`": small when the observed
        difference lies further below `bound` than swapping explains. The observed arrangement counts
        as one draw, so it is never 0. A `bound` other than 0 shifts the swap distribution by it."""
        if self.delta is None or not self.null_draws:
            return None
        return (1 + sum(1 for d in self.null_draws if d <= self.delta - bound)) / (len(self.null_draws) + 1)

    def p_above(self, bound: float) -> float | None:
        """One-sided p-value against "the difference is at most `bound`"."""
        if self.delta is None or not self.null_draws:
            return None
        return (1 + sum(1 for d in self.null_draws if d >= self.delta - bound)) / (len(self.null_draws) + 1)


def paired_difference(
    base: Sequence[Unit],
    candidate: Sequence[Unit],
    statistic: Statistic,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> PairedDifference:
    """`base[i]` and `candidate[i]` are the same unit in the two runs."""
    if len(base) != len(candidate):
        raise ValueError("paired units differ in number")
    base_value, candidate_value = statistic(base), statistic(candidate)
    delta = None if base_value is None or candidate_value is None else candidate_value - base_value
    if delta is None or not base:
        return PairedDifference(base_value, candidate_value, delta, None, len(base))
    rng = np.random.default_rng(seed)
    differences: list[float] = []
    for _ in range(resamples):
        drawn = rng.integers(0, len(base), len(base))
        b = statistic([base[i] for i in drawn])
        c = statistic([candidate[i] for i in drawn])
        if b is not None and c is not None:
            differences.append(c - b)
    ci = None
    if differences:
        tail = (1.0 - confidence) / 2.0
        low, high = np.quantile(np.asarray(differences), [tail, 1.0 - tail])
        ci = (float(low), float(high))
    return PairedDifference(
        base_value,
        candidate_value,
        delta,
        ci,
        len(base),
        _swapped_differences(base, candidate, statistic, resamples, rng),
    )


def _swapped_differences(
    base: Sequence[Unit], candidate: Sequence[Unit], statistic: Statistic, resamples: int, rng: np.random.Generator
) -> tuple[float, ...]:
    """The statistic's difference after swapping each unit's two results with probability 1/2."""
    found = []
    for _ in range(resamples):
        swap = rng.random(len(base)) < 0.5
        pairs = list(zip(base, candidate, swap, strict=True))
        swapped_base = statistic([theirs if flip else ours for ours, theirs, flip in pairs])
        swapped_candidate = statistic([ours if flip else theirs for ours, theirs, flip in pairs])
        if swapped_base is not None and swapped_candidate is not None:
            found.append(swapped_candidate - swapped_base)
    return tuple(found)
