"""Learning curves: held-out agreement as the number of fitted labels grows.

One calibration's held-out figure says little about the next user's: they bring 50 labels, not 375.
So the calibration is refitted on 25, 50, 100, 150 and all the fitting items of each of several seeded
splits, and every fit is scored on its split's held-out part. Rows per size: the calibrated panel (the
combination chosen on those items), the feature those items rank first (alone), the plain panel mean,
and the ridge panel alone (the combination used before candidates were weighed). Each row gives the
mean over splits and a percentile bootstrap interval of that mean; splits share items, so the interval
is narrower than a fresh sample of label sets would give.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from appliance.calibration.combiner import fit_feature_calibration
from appliance.calibration.features import fit_ridge_panel
from appliance.calibration.heldout import Predictor, fit_best_feature, panel_mean_predictor
from appliance.calibration.tables import ItemTable, split_items
from appliance.util.agreement import spearman

CURVE_SIZES = (25, 50, 100, 150)
CURVE_SPLITS = 10
ROWS = ("panel_calibrated", "fit_best_feature", "panel_mean", "ridge")


def _heldout_spearman(predict: Predictor, held: ItemTable) -> float | None:
    predicted = predict(held)
    present = np.isfinite(predicted) & np.isfinite(held.human)
    return spearman(predicted[present], held.human[present])


def _fitted_rows(
    fit: ItemTable, held: ItemTable, summary: str | None, seed: int
) -> tuple[str, dict[str, float | None]]:
    """The chosen combination's name and every row's held-out Spearman, fitted on `fit`."""
    human_scale = fit.annotator_range()
    combination = fit_feature_calibration(fit.features, fit.human, human_scale, summary=summary, seed=seed)
    ridge = fit_ridge_panel(fit.features, fit.human, human_scale, seed=seed)
    best = fit_best_feature(fit)
    predictors: dict[str, Predictor | None] = {
        "panel_calibrated": lambda t: combination.model.predict(t.features),
        "fit_best_feature": None if best is None else best[2],
        "panel_mean": panel_mean_predictor(fit),
        "ridge": lambda t: ridge.predict(t.features) if ridge.judges else np.full(len(t), np.nan),
    }
    values = {row: None if p is None else _heldout_spearman(p, held) for row, p in predictors.items()}
    return combination.chosen, values


def _mean_with_interval(values: list[float], seed: int, resamples: int = 1000) -> dict[str, Any]:
    if not values:
        return {"mean": None, "ci": None, "splits": 0}
    array = np.asarray(values)
    rng = np.random.default_rng(seed)
    means = array[rng.integers(0, len(array), size=(resamples, len(array)))].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    return {"mean": float(array.mean()), "ci": [float(low), float(high)], "splits": len(values)}


def learning_curve(
    table: ItemTable,
    *,
    summary: str | None,
    seed: int,
    heldout_fraction: float,
    sizes: tuple[int, ...] = CURVE_SIZES,
    splits: int = CURVE_SPLITS,
) -> dict[str, Any]:
    """Per fitting size (and `all`), every row's held-out Spearman over `splits` seeded splits, and how
    often each combination was chosen."""
    collected: dict[str, dict[str, list[float]]] = {}
    chosen: dict[str, dict[str, int]] = {}
    fitted: dict[str, int] = {}
    for split in range(splits):
        fit_ids, held_ids = split_items(list(table.item_ids), seed + split, heldout_fraction)
        fit, held = table.subset(fit_ids), table.subset(held_ids)
        rng = np.random.default_rng([seed, split])
        for size in [s for s in sizes if s < len(fit)] + [len(fit)]:
            label = "all" if size == len(fit) else str(size)
            fitted[label] = size
            rows = np.sort(rng.choice(len(fit), size=size, replace=False))
            name, values = _fitted_rows(fit.take(rows), held, summary, seed + split)
            chosen.setdefault(label, {})
            chosen[label][name] = chosen[label].get(name, 0) + 1
            for row, value in values.items():
                if value is not None:
                    collected.setdefault(label, {}).setdefault(row, []).append(value)
    points = []
    for label, by_row in collected.items():
        points.append(
            {
                "fit_items": fitted[label],
                "label": label,
                "rows": {row: _mean_with_interval(by_row.get(row, []), seed) for row in ROWS},
                "chosen": chosen[label],
            }
        )
    return {"splits": splits, "heldout_fraction": heldout_fraction, "points": points}


CURVE_HEADERS = ("fit items", "panel calibrated", "fit-best feature", "panel mean", "ridge alone", "chosen")


def curve_cells(curve: dict[str, Any]) -> list[tuple[str, ...]]:
    """The curve as rows of text under `CURVE_HEADERS`: each mean with its interval, and the combinations
    chosen (how many splits chose each)."""

    def cell(summary: dict[str, Any]) -> str:
        if summary["mean"] is None:
            return "-"
        low, high = summary["ci"]
        return f"{summary['mean']:.3f} [{low:.2f}, {high:.2f}]"

    lines = []
    for point in curve["points"]:
        chosen = ", ".join(f"{name} x{count}" for name, count in sorted(point["chosen"].items(), key=lambda c: -c[1]))
        size = f"{point['fit_items']}" + (" (all)" if point["label"] == "all" else "")
        lines.append((size, *(cell(point["rows"][row]) for row in ROWS), chosen))
    return lines
