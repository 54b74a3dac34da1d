"""Percentile bootstrap intervals, seeded so that reports are reproducible."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

DEFAULT_RESAMPLES = 2000


def bootstrap_interval(
    values: Sequence[float],
    statistic: Callable[[np.ndarray], float] = lambda sample: float(np.mean(sample)),
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """The `confidence` interval of `statistic` over resamples of `values` (None if empty)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return None
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, data.size, size=(resamples, data.size))
    estimates = np.array([statistic(data[row]) for row in indices])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(estimates, [tail, 1.0 - tail])
    return float(low), float(high)
