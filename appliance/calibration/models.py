"""Calibration models, fitted on the fitting part only.

Ratings: per judge an isotonic map from its score to the human scale, then
panel weights inversely proportional to each mapped judge's squared error on
the fitting part (a better judge counts more; a useless one, mapped flat,
counts little). Pairwise: per judge a weight from its agreement with humans
beyond chance (Cohen's kappa, floored at 0) and a tie band on the weighted
vote, chosen to maximise agreement on the fitting part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from appliance.calibration.combiner import Blend, FeatureAverage, FeaturePanel
from appliance.calibration.features import (
    FOLDS,
    FeatureCalibration,
    PairFeatureCalibration,
    fold_ids,
    weighted_mean_present,
)
from appliance.calibration.isotonic import IsotonicMap, fit_isotonic
from appliance.calibration.tables import ItemTable
from appliance.util.agreement import agreement, cohen_kappa

TIE_BANDS = (0.0, 0.25, 0.5, 0.75)
#: the kinds of calibration that map a rating (not a preference) onto the human scale: what runs apply
RATING_KINDS = ("rating", "features", "feature_average", "blend")


def rescale(values: np.ndarray, source: tuple[float, float], target: tuple[float, float]) -> np.ndarray:
    """Linear map between scales, for comparing an uncalibrated judge with humans."""
    (s_low, s_high), (t_low, t_high) = source, target
    return t_low + (values - s_low) * (t_high - t_low) / (s_high - s_low)


@dataclass(frozen=True)
class RatingCalibration:
    maps: dict[str, IsotonicMap]
    weights: dict[str, float]

    def judge_prediction(self, judge: str, scores: np.ndarray) -> np.ndarray:
        mapped = np.interp(scores, self.maps[judge].xs, self.maps[judge].ys)
        return np.where(np.isfinite(scores), mapped, np.nan)

    def predict(self, judges: dict[str, np.ndarray]) -> np.ndarray:
        """Weighted mean of the mapped judges available for each item (NaN if none)."""
        mapped = {judge: self.judge_prediction(judge, judges[judge]) for judge in self.weights if judge in judges}
        return weighted_mean_present(mapped, self.weights, len(next(iter(judges.values()))))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "rating",
            "maps": {j: m.to_json() for j, m in self.maps.items()},
            "weights": self.weights,
        }


def fit_rating_calibration(fit: ItemTable, seed: int = 0) -> RatingCalibration:
    """Each judge's isotonic map on the fitting part; its panel weight from out-of-fold errors.

    The error that sets a weight is cross-fitted (each item mapped by a map fitted without its fold),
    since an isotonic map fits its own items closely and would flatter a useless judge.
    """
    maps: dict[str, IsotonicMap] = {}
    errors: dict[str, float] = {}
    for judge, scores in fit.judges.items():
        present = np.isfinite(scores) & np.isfinite(fit.human)
        if not present.any():
            continue
        x, y = scores[present], fit.human[present]
        maps[judge] = fit_isotonic(x, y)
        folds = fold_ids(len(y), min(FOLDS, len(y)), seed)
        squared = []
        for fold in np.unique(folds):
            train, test = folds != fold, folds == fold
            if not train.any():
                continue
            mapping = fit_isotonic(x[train], y[train])
            squared.extend((np.interp(x[test], mapping.xs, mapping.ys) - y[test]) ** 2)
        errors[judge] = max(float(np.mean(squared)) if squared else 1.0, 1e-6)
    inverse = {judge: 1.0 / error for judge, error in errors.items()}
    total = sum(inverse.values())
    return RatingCalibration(maps, {judge: value / total for judge, value in inverse.items()})


@dataclass(frozen=True)
class PairwiseCalibration:
    weights: dict[str, float]
    tie_band: float

    def predict(self, table: ItemTable) -> np.ndarray:
        return vote(table, self.weights, self.tie_band)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "pairwise", "weights": self.weights, "tie_band": self.tie_band}


def vote(table: ItemTable, weights: dict[str, float], tie_band: float) -> np.ndarray:
    """+1 / -1 / 0 from the weighted mean of the judges' order-checked outcomes (NaN if none parsed)."""
    total, weight = np.zeros(len(table)), np.zeros(len(table))
    for judge, judge_weight in weights.items():
        outcomes = table.pair_outcomes(judge)
        present = np.isfinite(outcomes)
        total[present] += judge_weight * outcomes[present]
        weight[present] += judge_weight
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.where(weight > 0, total / np.where(weight > 0, weight, 1.0), np.nan)
    decided = np.where(score > tie_band, 1.0, np.where(score < -tie_band, -1.0, 0.0))
    return np.where(np.isfinite(score), decided, np.nan)


def fit_pairwise_calibration(fit: ItemTable) -> PairwiseCalibration:
    kappas: dict[str, float] = {}
    for judge in fit.judges:
        outcomes = fit.pair_outcomes(judge)
        present = np.isfinite(outcomes) & np.isfinite(fit.human)
        kappa = cohen_kappa(outcomes[present], fit.human[present]) if present.any() else None
        kappas[judge] = max(kappa or 0.0, 0.0)
    total = sum(kappas.values())
    weights = {j: (k / total if total > 0 else 1.0 / len(kappas)) for j, k in kappas.items()}

    def fit_agreement(band: float) -> float:
        predicted = vote(fit, weights, band)
        present = np.isfinite(predicted) & np.isfinite(fit.human)
        return agreement(predicted[present], fit.human[present]) or 0.0

    best = max(TIE_BANDS, key=fit_agreement)
    return PairwiseCalibration(weights, best)


def calibration_from_json(
    data: dict[str, Any],
) -> RatingCalibration | PairwiseCalibration | FeaturePanel | PairFeatureCalibration:
    if data.get("kind") == "blend":
        return Blend.from_json(data)
    if data.get("kind") == "feature_average":
        return FeatureAverage.from_json(data)
    if data.get("kind") == "features":
        return FeatureCalibration.from_json(data)
    if data.get("kind") == "pair_features":
        return PairFeatureCalibration.from_json(data)
    if data.get("kind") == "pairwise":
        return PairwiseCalibration(dict(data["weights"]), float(data["tie_band"]))
    return RatingCalibration({j: IsotonicMap.from_json(m) for j, m in data["maps"].items()}, dict(data["weights"]))
