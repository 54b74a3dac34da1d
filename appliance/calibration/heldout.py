"""Held-out agreement of judges, panels and baselines with humans, each with a bootstrap interval.

Rows reported:
- each judge: raw scores linearly rescaled to the human scale (so MAE and
  alpha are meaningful), and under `calibrated` its own isotonic map;
- `panel_mean`: the plain mean of the rescaled judges;
- `panel_calibrated`: the fitted calibration;
- `human_ceiling`: each annotator against the mean (pairwise: majority) of
  the others, averaged over annotators: what agreement humans reach;
- `length_baseline`: response length alone, isotonic-mapped on the fitting
  part (pairwise: the longer response wins).
Intervals resample held-out items.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from appliance.calibration.isotonic import fit_isotonic
from appliance.calibration.metrics import (
    agreement,
    bootstrap_metrics,
    cohen_kappa,
    kendall_tau_b,
    krippendorff_alpha_interval,
    mae,
    pearson,
    spearman,
)
from appliance.calibration.models import PairwiseCalibration, RatingCalibration, rescale, vote
from appliance.calibration.tables import ItemTable, majority

Row = dict[str, Any]
Predictor = Callable[[ItemTable], np.ndarray]


def rating_metrics(predicted: np.ndarray, human: np.ndarray) -> dict[str, float | None]:
    present = np.isfinite(predicted) & np.isfinite(human)
    x, y = predicted[present], human[present]
    return {
        "spearman": spearman(x, y),
        "kendall": kendall_tau_b(x, y),
        "pearson": pearson(x, y),
        "krippendorff_alpha": krippendorff_alpha_interval(np.column_stack([x, y])),
        "mae": mae(x, y),
    }


def pairwise_metrics(predicted: np.ndarray, human: np.ndarray) -> dict[str, float | None]:
    present = np.isfinite(predicted) & np.isfinite(human)
    x, y = predicted[present], human[present]
    return {"kappa": cohen_kappa(x, y), "agreement": agreement(x, y)}


def _with_intervals(
    table: ItemTable, compute: Callable[[ItemTable], dict[str, float | None]], seed: int, resamples: int
) -> Row:
    values = compute(table)
    intervals = bootstrap_metrics(lambda rows: compute(table.take(rows)), len(table), seed=seed, resamples=resamples)
    row: Row = {
        name: {"value": value, "ci": None if intervals.get(name) is None else list(intervals[name])}  # type: ignore[arg-type]
        for name, value in values.items()
    }
    return row


def _count(predicted: np.ndarray, human: np.ndarray) -> int:
    return int(np.count_nonzero(np.isfinite(predicted) & np.isfinite(human)))


def rating_report(
    fit: ItemTable,
    held: ItemTable,
    calibration: RatingCalibration,
    *,
    judge_scale: tuple[float, float],
    human_scale: tuple[float, float],
    seed: int,
    resamples: int = 1000,
) -> Row:
    def scored(predict: Predictor) -> Row:
        row = _with_intervals(held, lambda t: rating_metrics(predict(t), t.human), seed, resamples)
        row["n"] = _count(predict(held), held.human)
        return row

    def rescaled(table: ItemTable, judge: str) -> np.ndarray:
        return rescale(table.judges[judge], judge_scale, human_scale)

    def panel_mean(table: ItemTable) -> np.ndarray:
        stacked = np.vstack([rescaled(table, j) for j in table.judges])
        present = np.isfinite(stacked).any(axis=0)
        with np.errstate(invalid="ignore"):
            means = np.nanmean(np.where(present, stacked, 0.0), axis=0)
        return np.where(present, means, np.nan)

    judges: Row = {}
    for judge in held.judges:
        judges[judge] = scored(lambda t, j=judge: rescaled(t, j))  # type: ignore[misc]
        if judge in calibration.maps:
            judges[judge]["calibrated"] = scored(
                lambda t, j=judge: calibration.judge_prediction(j, t.judges[j])  # type: ignore[misc]
            )
    present = np.isfinite(fit.length) & np.isfinite(fit.human)
    length_map = fit_isotonic(fit.length[present], fit.human[present])
    return {
        "judges": judges,
        "panel_mean": scored(panel_mean),
        "panel_calibrated": scored(lambda t: calibration.predict(t.judges)),
        "human_ceiling": _rating_ceiling(held, seed, resamples),
        "length_baseline": scored(lambda t: np.interp(t.length, length_map.xs, length_map.ys)),
    }


def _rating_ceiling(held: ItemTable, seed: int, resamples: int) -> Row:
    def compute(table: ItemTable) -> dict[str, float | None]:
        per_annotator: list[dict[str, float | None]] = []
        for annotator, values in table.annotators.items():
            others = np.vstack([v for a, v in table.annotators.items() if a != annotator])
            counts = np.isfinite(others).sum(axis=0)
            with np.errstate(invalid="ignore"):
                rest = np.where(counts > 0, np.nansum(others, axis=0) / np.maximum(counts, 1), np.nan)
            per_annotator.append(rating_metrics(values, rest))
        return _average(per_annotator)

    return _with_intervals(held, compute, seed, resamples) | {"annotators": len(held.annotators)}


def _average(rows: list[dict[str, float | None]]) -> dict[str, float | None]:
    names = rows[0].keys() if rows else []
    averaged: dict[str, float | None] = {}
    for name in names:
        values = [row[name] for row in rows if row[name] is not None]
        averaged[name] = float(np.mean(values)) if values else None  # type: ignore[arg-type]
    return averaged


def position_bias(table: ItemTable, judges: list[str]) -> float | None:
    """Share of order-checked verdicts where the judge picked the same position in both orders."""
    assert table.swapped is not None
    biased, counted = 0, 0
    for judge in judges:
        original, swapped = table.judges[judge], table.swapped[judge]
        both = np.isfinite(original) & np.isfinite(swapped)
        counted += int(both.sum())
        biased += int(np.count_nonzero((original == -swapped) & (original != 0) & both))
    return biased / counted if counted else None


def pairwise_report(
    fit: ItemTable, held: ItemTable, calibration: PairwiseCalibration, *, seed: int, resamples: int = 1000
) -> Row:
    def scored(predict: Predictor, judges: list[str] | None) -> Row:
        def compute(table: ItemTable) -> dict[str, float | None]:
            metrics = pairwise_metrics(predict(table), table.human)
            if judges is not None:
                metrics["position_bias"] = position_bias(table, judges)
            return metrics

        row = _with_intervals(held, compute, seed, resamples)
        row["n"] = _count(predict(held), held.human)
        return row

    names = list(held.judges)
    equal = {j: 1.0 for j in names}
    return {
        "judges": {j: scored(lambda t, j=j: t.pair_outcomes(j), [j]) for j in names},  # type: ignore[misc]
        "panel_mean": scored(lambda t: vote(t, equal, 0.0), names),
        "panel_calibrated": scored(calibration.predict, names),
        "human_ceiling": _pairwise_ceiling(held, seed, resamples),
        "length_baseline": scored(lambda t: t.length, None),
    }


def _pairwise_ceiling(held: ItemTable, seed: int, resamples: int) -> Row:
    def compute(table: ItemTable) -> dict[str, float | None]:
        per_annotator = []
        for annotator, values in table.annotators.items():
            others = np.vstack([v for a, v in table.annotators.items() if a != annotator])
            rest = np.asarray([majority(others[:, i]) for i in range(len(table))])
            per_annotator.append(pairwise_metrics(values, rest))
        return _average(per_annotator)

    return _with_intervals(held, compute, seed, resamples) | {"annotators": len(held.annotators)}
