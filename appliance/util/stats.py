"""Statistics shared by reports, families and calibration: seeded bootstrap intervals, Cohen's kappa.

It sits below all of them so that no family imports a report or calibration module for arithmetic.
"""

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


def cohen_kappa(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float | None:
    """Agreement beyond chance of two categorical ratings; None where chance agreement is total."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape:
        raise ValueError("metric inputs differ in length")
    if a.size == 0:
        return None
    categories = np.union1d(a, b)
    observed = float(np.mean(a == b))
    expected = float(sum(np.mean(a == c) * np.mean(b == c) for c in categories))
    if expected == 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


def cluster_bootstrap_interval(
    values: Sequence[float],
    clusters: Sequence[str],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """The interval of the mean when whole clusters are resampled (e.g. a task with all its scripts).

    Values of one cluster are not independent, so resampling them one by one gives intervals that
    are too narrow; this draws clusters with replacement and takes the mean of everything drawn.
    """
    if len(values) != len(clusters):
        raise ValueError("values and clusters differ in length")
    if not values:
        return None
    names = sorted(set(clusters))
    sums = np.array([sum(v for v, c in zip(values, clusters, strict=True) if c == name) for name in names])
    counts = np.array([sum(1 for c in clusters if c == name) for name in names], dtype=float)
    rng = np.random.default_rng(seed)
    drawn = rng.integers(0, len(names), size=(resamples, len(names)))
    estimates = sums[drawn].sum(axis=1) / counts[drawn].sum(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(estimates, [tail, 1.0 - tail])
    return float(low), float(high)


def holm_adjusted(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment: rejecting where the adjusted p-value is at most alpha keeps the
    chance of any false rejection among these tests at most alpha, whatever their dependence."""
    known = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(known):
        running = max(running, min(1.0, (len(known) - rank) * p))
        adjusted[index] = running
    return adjusted
