"""Agreement metrics between judge scores and human labels, and their bootstrap intervals.

Written with numpy only (scipy is a test-time reference, not a runtime
dependency). Every function returns None where the metric is undefined
(fewer than two items, a constant input), rather than a misleading 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from appliance.util.stats import cohen_kappa

Vector = np.ndarray

__all__ = [
    "agreement",
    "bootstrap_metrics",
    "cohen_kappa",
    "kendall_tau_b",
    "krippendorff_alpha_interval",
    "mae",
    "pearson",
    "spearman",
    "spearman_columns",
]


def _pair(x: Sequence[float] | Vector, y: Sequence[float] | Vector) -> tuple[Vector, Vector]:
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape:
        raise ValueError("metric inputs differ in length")
    return a, b


def pearson(x: Sequence[float] | Vector, y: Sequence[float] | Vector) -> float | None:
    a, b = _pair(x, y)
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    a, b = a - a.mean(), b - b.mean()
    return float(np.clip((a @ b) / np.sqrt((a @ a) * (b @ b)), -1.0, 1.0))


def rank(values: Vector) -> Vector:
    """Ranks from 1, ties given their average rank."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size, dtype=float)
    ranks[order] = np.arange(1, values.size + 1, dtype=float)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return np.asarray(sums[inverse] / counts[inverse], dtype=float)


def spearman(x: Sequence[float] | Vector, y: Sequence[float] | Vector) -> float | None:
    a, b = _pair(x, y)
    return pearson(rank(a), rank(b)) if a.size >= 2 else None


def rank_columns(matrix: Vector) -> Vector:
    """`rank` of every column at once (ties their average rank): a calibration ranks dozens of features
    in every cross-validation fold."""
    rows = matrix.shape[0]
    order = np.argsort(matrix, axis=0, kind="mergesort")
    ordered = np.take_along_axis(matrix, order, axis=0)
    position = np.broadcast_to(np.arange(rows)[:, None], matrix.shape)
    starts = np.ones(matrix.shape, dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    ends = np.ones(matrix.shape, dtype=bool)
    ends[:-1] = starts[1:]
    first = np.maximum.accumulate(np.where(starts, position, 0), axis=0)
    last = np.minimum.accumulate(np.where(ends, position, rows)[::-1], axis=0)[::-1]
    ranks = np.empty(matrix.shape)
    np.put_along_axis(ranks, order, (first + last) / 2.0 + 1.0, axis=0)
    return ranks


def spearman_columns(matrix: Vector, target: Vector) -> Vector:
    """`spearman` of every column of a complete matrix with the target; NaN where it is undefined."""
    ranks = rank_columns(np.asarray(matrix, dtype=float))
    target_ranks = rank(np.asarray(target, dtype=float))
    if ranks.shape[0] < 2:
        return np.full(ranks.shape[1], np.nan)
    centred, centred_target = ranks - ranks.mean(axis=0), target_ranks - target_ranks.mean()
    norms = np.sqrt((centred**2).sum(axis=0) * (centred_target @ centred_target))
    with np.errstate(invalid="ignore", divide="ignore"):
        values: Vector = np.clip(centred.T @ centred_target / norms, -1.0, 1.0)
    return np.where(norms > 0, values, np.nan)


def kendall_tau_b(x: Sequence[float] | Vector, y: Sequence[float] | Vector) -> float | None:
    """Kendall's tau-b, which corrects for ties (the variant scipy computes by default)."""
    a, b = _pair(x, y)
    n = a.size
    if n < 2:
        return None
    upper = np.triu_indices(n, k=1)
    dx = np.sign(a[:, None] - a[None, :])[upper]
    dy = np.sign(b[:, None] - b[None, :])[upper]
    pairs_x = np.count_nonzero(dx)
    pairs_y = np.count_nonzero(dy)
    if pairs_x == 0 or pairs_y == 0:
        return None
    return float((dx @ dy) / np.sqrt(float(pairs_x) * float(pairs_y)))


def mae(x: Sequence[float] | Vector, y: Sequence[float] | Vector) -> float | None:
    a, b = _pair(x, y)
    return float(np.mean(np.abs(a - b))) if a.size else None


def krippendorff_alpha_interval(units: Sequence[Sequence[float | None]] | Vector) -> float | None:
    """Krippendorff's alpha, interval metric; one row per unit, one column per coder (None/NaN = missing).

    alpha = 1 - D_o / D_e over pairable values (units with at least two values).
    """
    table = np.asarray(units, dtype=float)
    present = np.isfinite(table)
    counts = present.sum(axis=1)
    pairable = counts >= 2
    if not pairable.any():
        return None
    values = np.where(present, table, 0.0)[pairable]
    counts = counts[pairable]
    n = int(counts.sum())
    # sum over ordered pairs i != j of (v_i - v_j)^2 is 2 (m sum v^2 - (sum v)^2)
    sums, squares = values.sum(axis=1), (values**2).sum(axis=1)
    within = 2.0 * (counts * squares - sums**2)
    expected = 2.0 * (n * squares.sum() - sums.sum() ** 2)
    if expected <= 0:
        return None
    observed = float(np.sum(within / (counts - 1)))
    return float(1.0 - (n - 1) * observed / expected)


def agreement(x: Sequence[float] | Vector, y: Sequence[float] | Vector) -> float | None:
    a, b = _pair(x, y)
    return float(np.mean(a == b)) if a.size else None


MetricSet = Callable[[Vector], dict[str, float | None]]


def bootstrap_metrics(
    compute: MetricSet,
    size: int,
    *,
    seed: int,
    resamples: int = 1000,
    confidence: float = 0.95,
    clusters: np.ndarray | None = None,
) -> dict[str, tuple[float, float] | None]:
    """Percentile intervals of every metric `compute(indices)` returns, resampling items.

    `clusters`: a label per item; items with the same label (e.g. replies to one context) are
    resampled together, since they are not independent.
    """
    rng = np.random.default_rng(seed)
    groups = _cluster_members(clusters) if clusters is not None else None
    samples: dict[str, list[float]] = {}
    for _ in range(resamples if size else 0):
        if groups is None:
            rows = rng.integers(0, size, size=size)
        else:
            rows = np.concatenate([groups[i] for i in rng.integers(0, len(groups), size=len(groups))])
        for name, value in compute(rows).items():
            if value is not None and np.isfinite(value):
                samples.setdefault(name, []).append(value)
    tail = (1.0 - confidence) / 2.0
    intervals: dict[str, tuple[float, float] | None] = {}
    for name, values in samples.items():
        # an interval needs most resamples to define the metric
        if len(values) < resamples // 2:
            intervals[name] = None
        else:
            low, high = np.quantile(values, [tail, 1.0 - tail])
            intervals[name] = (float(low), float(high))
    return intervals


def _cluster_members(clusters: np.ndarray) -> list[np.ndarray]:
    """The row indices of each cluster, in order of first appearance."""
    members: dict[object, list[int]] = {}
    for row, label in enumerate(clusters.tolist()):
        members.setdefault(label, []).append(row)
    return [np.asarray(rows, dtype=int) for rows in members.values()]
