"""The paired bootstrap: resample shared units, recompute a statistic on both runs, take the difference.

Pairing removes what the two runs share (the instance's difficulty), so the interval of the
difference is much narrower than two independent intervals would suggest.
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
    #: two-sided bootstrap p-value of "no difference"
    p_value: float | None
    pairs: int


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
        return PairedDifference(base_value, candidate_value, delta, None, None, len(base))
    rng = np.random.default_rng(seed)
    differences: list[float] = []
    for _ in range(resamples):
        drawn = rng.integers(0, len(base), len(base))
        b = statistic([base[i] for i in drawn])
        c = statistic([candidate[i] for i in drawn])
        if b is not None and c is not None:
            differences.append(c - b)
    if not differences:
        return PairedDifference(base_value, candidate_value, delta, None, None, len(base))
    values = np.asarray(differences)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    below, above = float(np.mean(values <= 0.0)), float(np.mean(values >= 0.0))
    p_value = min(1.0, 2.0 * min(below, above))
    return PairedDifference(base_value, candidate_value, delta, (float(low), float(high)), p_value, len(base))
