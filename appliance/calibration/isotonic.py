"""Isotonic regression (pool adjacent violators): a monotone map from judge score to human scale.

A judge that ranks well but uses its scale oddly (everything 7-9) is mapped
onto the human scale without changing its order; a judge whose scores do not
rise with human scores gets a flat map and so stops moving the panel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class IsotonicMap:
    """Breakpoints of a non-decreasing piecewise-linear map; constant beyond the ends."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    def __call__(self, value: float) -> float:
        return float(np.interp(value, self.xs, self.ys))

    def to_json(self) -> dict[str, list[float]]:
        return {"xs": list(self.xs), "ys": list(self.ys)}

    @classmethod
    def from_json(cls, data: dict[str, list[float]]) -> IsotonicMap:
        return cls(tuple(data["xs"]), tuple(data["ys"]))


def fit_isotonic(x: np.ndarray, y: np.ndarray) -> IsotonicMap:
    """Least-squares non-decreasing fit of y on x (ties in x pooled first)."""
    if x.size == 0:
        raise ValueError("isotonic fit needs at least one point")
    levels, inverse = np.unique(x, return_inverse=True)
    weights = np.bincount(inverse).astype(float)
    means = np.bincount(inverse, weights=y) / weights
    # pool adjacent violators over the blocks of equal x
    block_values: list[float] = []
    block_weights: list[float] = []
    block_sizes: list[int] = []
    for value, weight in zip(means, weights, strict=True):
        block_values.append(float(value))
        block_weights.append(float(weight))
        block_sizes.append(1)
        while len(block_values) > 1 and block_values[-2] > block_values[-1]:
            total = block_weights[-2] + block_weights[-1]
            merged = (block_values[-2] * block_weights[-2] + block_values[-1] * block_weights[-1]) / total
            size = block_sizes[-2] + block_sizes[-1]
            del block_values[-1], block_weights[-1], block_sizes[-1]
            block_values[-1], block_weights[-1], block_sizes[-1] = merged, total, size
    fitted = np.repeat(block_values, block_sizes)
    return IsotonicMap(tuple(float(v) for v in levels), tuple(float(v) for v in fitted))
