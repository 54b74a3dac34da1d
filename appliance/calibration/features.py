"""Calibrating probability-reading judges: features combined into a score on the human scale.

Per judge, a monotone ridge regression on its standardised features (each feature in the direction
the fitting part shows, with a non-negative weight), the penalty chosen by K-fold
cross-validation inside the fitting part. The panel combines its judges' predictions with
non-negative weights that sum to one, fitted on out-of-fold predictions (each judge's model
refitted without the fold), so a judge that only fits its own training items gains nothing.
Everything here sees the fitting part only. For ratings the ridge panel is one candidate that
`combiner` weighs against simpler combinations; pairwise calibrations use it directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from appliance.util.agreement import spearman_columns

ALPHAS = (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)
FOLDS = 5
FeatureColumns = dict[str, np.ndarray]


def fold_ids(size: int, folds: int, seed: int) -> np.ndarray:
    """A seeded assignment of `size` rows to `folds` folds of near-equal size."""
    ids = np.arange(size) % folds
    np.random.default_rng(seed).shuffle(ids)
    return ids


@dataclass(frozen=True)
class RidgeModel:
    """y ~ intercept + coefs . (x - center) / scale, on the named features."""

    features: tuple[str, ...]
    center: tuple[float, ...]
    scale: tuple[float, ...]
    coefs: tuple[float, ...]
    intercept: float
    alpha: float

    def predict(self, columns: FeatureColumns) -> np.ndarray:
        """NaN for a row missing any of the model's features."""
        matrix = np.column_stack([columns[name] for name in self.features])
        standard = (matrix - np.asarray(self.center)) / np.asarray(self.scale)
        predicted: np.ndarray = self.intercept + standard @ np.asarray(self.coefs)
        return predicted

    def to_json(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "center": list(self.center),
            "scale": list(self.scale),
            "coefs": list(self.coefs),
            "intercept": self.intercept,
            "alpha": self.alpha,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RidgeModel:
        return cls(
            tuple(data["features"]),
            tuple(data["center"]),
            tuple(data["scale"]),
            tuple(data["coefs"]),
            float(data["intercept"]),
            float(data["alpha"]),
        )


def nonnegative_quadratic_minimum(hessian: np.ndarray, linear: np.ndarray) -> np.ndarray:
    """argmin over w >= 0 of w.H.w / 2 - c.w for a positive definite H: the active-set method of Lawson
    and Hanson on the quadratic's own terms (exact; a few small solves for a few dozen features)."""
    size = len(linear)
    weights = np.zeros(size)
    free = np.zeros(size, dtype=bool)
    tolerance = 1e-12 * max(1.0, float(np.abs(linear).max(initial=0.0)))
    for _ in range(3 * size + 1):
        descent = linear - hessian @ weights
        candidates = np.where(~free & (descent > tolerance))[0]
        if candidates.size == 0:
            break
        free[candidates[np.argmax(descent[candidates])]] = True
        while True:
            trial = np.zeros(size)
            trial[free] = np.linalg.solve(hessian[np.ix_(free, free)], linear[free])
            if (trial[free] > 0).all():
                weights = trial
                break
            blocked = free & (trial <= 0)
            gap = weights[blocked] - trial[blocked]  # > 0 but for a weight that rounding left at 0
            step = float(np.min(np.where(gap > 0, weights[blocked] / np.where(gap > 0, gap, 1.0), 0.0)))
            weights = weights + step * (trial - weights)
            free &= weights > tolerance
            weights[~free] = 0.0
    return weights


def _solve(
    matrix: np.ndarray, target: np.ndarray, alpha: float, *, through_origin: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """A monotone ridge fit: each standardised feature enters in the direction its rank correlation with
    the target shows on these rows, with a non-negative weight (the exact minimum of the penalised squared
    error). A feature whose direction flips from one sample to another is left out rather than fitted
    with a sign that noise chose. `through_origin`: no centre and no intercept, so that features of zero
    predict zero (a pair's differences: two equal responses are a tie, whichever is shown first)."""
    center = np.zeros(matrix.shape[1]) if through_origin else matrix.mean(axis=0)
    scale = np.sqrt(np.mean(matrix**2, axis=0)) if through_origin else matrix.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    standard = (matrix - center) / scale
    intercept = 0.0 if through_origin else float(target.mean())
    signs = np.where(np.nan_to_num(spearman_columns(standard, target)) >= 0, 1.0, -1.0)
    oriented = standard * signs
    hessian = oriented.T @ oriented + alpha * np.eye(oriented.shape[1])
    weights = nonnegative_quadratic_minimum(hessian, oriented.T @ (target - intercept))
    return center, scale, weights * signs, intercept


def _complete_rows(columns: FeatureColumns, features: list[str], target: np.ndarray) -> np.ndarray:
    present = np.isfinite(target)
    for name in features:
        present &= np.isfinite(columns[name])
    rows: np.ndarray = present
    return rows


def fit_ridge(
    columns: FeatureColumns, target: np.ndarray, *, seed: int, folds: int = FOLDS, through_origin: bool = False
) -> RidgeModel | None:
    """The monotone ridge model with the penalty of least cross-validated squared error; None without enough
    rows."""
    features = sorted(columns)
    rows = _complete_rows(columns, features, target)
    if rows.sum() < max(folds * 2, len(features) + 2):
        return None
    matrix = np.column_stack([columns[name][rows] for name in features])
    y = target[rows]
    assignment = fold_ids(len(y), folds, seed)

    def cv_error(alpha: float) -> float:
        errors = []
        for fold in range(folds):
            train, test = assignment != fold, assignment == fold
            center, scale, coefs, intercept = _solve(matrix[train], y[train], alpha, through_origin=through_origin)
            predicted = intercept + ((matrix[test] - center) / scale) @ coefs
            errors.append(np.mean((predicted - y[test]) ** 2))
        return float(np.mean(errors))

    alpha = min(ALPHAS, key=cv_error)
    center, scale, coefs, intercept = _solve(matrix, y, alpha, through_origin=through_origin)
    return RidgeModel(
        tuple(features), tuple(map(float, center)), tuple(map(float, scale)), tuple(map(float, coefs)), intercept, alpha
    )


def out_of_fold(
    columns: FeatureColumns, target: np.ndarray, *, seed: int, folds: int = FOLDS, through_origin: bool = False
) -> np.ndarray:
    """Each row predicted by a model fitted (penalty chosen too) without the row's fold."""
    predicted = np.full(len(target), np.nan)
    assignment = fold_ids(len(target), folds, seed + 1)
    for fold in range(folds):
        train = assignment != fold
        model = fit_ridge(
            {k: v[train] for k, v in columns.items()}, target[train], seed=seed, through_origin=through_origin
        )
        if model is not None:
            test = assignment == fold
            predicted[test] = model.predict({k: v[test] for k, v in columns.items()})
    return predicted


def simplex_weights(predictions: np.ndarray, target: np.ndarray, steps: int = 2000) -> np.ndarray:
    """Non-negative weights summing to one that minimise the squared error of the weighted mean.

    Exponentiated gradient descent on the rows where every prediction is present; equal
    weights when no row is.
    """
    judges = predictions.shape[1]
    weights = np.full(judges, 1.0 / judges)
    rows = np.isfinite(target) & np.isfinite(predictions).all(axis=1)
    if not rows.any():
        return weights
    x, y = predictions[rows], target[rows]
    rate = 1.0 / max(float(np.mean(x**2)), 1e-9)
    for _ in range(steps):
        gradient = 2.0 * x.T @ (x @ weights - y) / len(y)
        weights = weights * np.exp(-rate * gradient)
        weights /= weights.sum()
    return weights


def weighted_mean_present(predictions: dict[str, np.ndarray], weights: dict[str, float], size: int) -> np.ndarray:
    """Per row, the weighted mean of the judges whose prediction is present (weights renormalised); NaN if none."""
    total, weight = np.zeros(size), np.zeros(size)
    for judge, predicted in predictions.items():
        present = np.isfinite(predicted)
        total[present] += weights[judge] * predicted[present]
        weight[present] += weights[judge]
    with np.errstate(invalid="ignore", divide="ignore"):
        result: np.ndarray = np.where(weight > 0, total / np.where(weight > 0, weight, 1.0), np.nan)
    return result


@dataclass(frozen=True)
class FeatureCalibration:
    """Per judge a ridge model of its features; the panel a weighted mean of the judges' predictions."""

    judges: dict[str, RidgeModel]
    weights: dict[str, float]
    human_scale: tuple[float, float]

    def judge_prediction(self, judge: str, columns: FeatureColumns) -> np.ndarray:
        """On the human scale (clipped to it); NaN where a feature is missing."""
        predicted: np.ndarray = np.clip(self.judges[judge].predict(columns), *self.human_scale)
        return predicted

    def predict(self, by_judge: dict[str, FeatureColumns]) -> np.ndarray:
        """The weighted mean of the judges present for each row (weights renormalised), NaN if none."""
        predictions = {
            judge: self.judge_prediction(judge, columns)
            for judge, columns in by_judge.items()
            if judge in self.judges and self.weights.get(judge, 0.0) > 0
        }
        size = len(next(iter(next(iter(by_judge.values())).values())))
        return weighted_mean_present(predictions, self.weights, size)

    def features_by_judge(self) -> dict[str, tuple[str, ...]]:
        """The features each judge must supply."""
        return {judge: model.features for judge, model in self.judges.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "features",
            "judges": {judge: model.to_json() for judge, model in self.judges.items()},
            "weights": self.weights,
            "human_scale": list(self.human_scale),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FeatureCalibration:
        low, high = data["human_scale"]
        return cls(
            {judge: RidgeModel.from_json(model) for judge, model in data["judges"].items()},
            {judge: float(weight) for judge, weight in data["weights"].items()},
            (float(low), float(high)),
        )


def fit_ridge_panel(
    by_judge: dict[str, FeatureColumns],
    human: np.ndarray,
    human_scale: tuple[float, float],
    *,
    seed: int,
    through_origin: bool = False,
) -> FeatureCalibration:
    """Judges' models on the fitting part, and panel weights from their out-of-fold predictions."""
    models: dict[str, RidgeModel] = {}
    cross_fitted: dict[str, np.ndarray] = {}
    for judge, columns in by_judge.items():
        model = fit_ridge(columns, human, seed=seed, through_origin=through_origin)
        if model is not None:
            models[judge] = model
            folded = out_of_fold(columns, human, seed=seed, through_origin=through_origin)
            cross_fitted[judge] = np.clip(folded, *human_scale)
    names = sorted(models)
    weights = simplex_weights(np.column_stack([cross_fitted[j] for j in names]), human) if names else np.zeros(0)
    return FeatureCalibration(models, {j: float(w) for j, w in zip(names, weights, strict=True)}, human_scale)


#: tie bands tried for a pairwise calibration, in units of the predicted preference (-1..1)
PAIR_TIE_BANDS = (0.0, 0.05, 0.1, 0.2, 0.3)


def decide(score: np.ndarray, band: float) -> np.ndarray:
    """+1 / -1 outside the tie band, 0 inside it, NaN where the score is missing."""
    decided = np.where(score > band, 1.0, np.where(score < -band, -1.0, 0.0))
    result: np.ndarray = np.where(np.isfinite(score), decided, np.nan)
    return result


#: the feature sets a pairwise calibration chooses among on its fitting part, by out-of-fold agreement with
#: the human majority: every feature of every judge; the judges' direct comparison (`preference`) beside the
#: responses' length difference; the length difference alone. A ridge on every feature of two judges has
#: twenty coefficients for a few hundred pairs; the smaller sets are the ones it may be overfitting past.
PAIR_FEATURE_SETS: dict[str, tuple[str, ...] | None] = {
    "every feature": None,
    "direct preference and length": ("preference", "tokens"),
    "length": ("tokens",),
}


#: pair features that do not change sign when the two responses swap places (the lean to slot A): a
#: regression through the origin on the differences leaves them out, so the preference it predicts is
#: antisymmetric and two equal responses tie
ORDER_FREE_FEATURES = frozenset({"position_lean"})


@dataclass(frozen=True)
class PairFeatureCalibration:
    """A feature calibration of the preference (-1..1) from the pair's feature differences, and a tie band."""

    features: FeatureCalibration
    tie_band: float
    #: the `PAIR_FEATURE_SETS` entry chosen on the fitting part
    feature_set: str = "every feature"
    #: each candidate set's out-of-fold agreement inside the fitting part (what chose it)
    fit_agreement: dict[str, float] = field(default_factory=dict)

    def predict(self, by_judge: dict[str, FeatureColumns]) -> np.ndarray:
        return decide(self.features.predict(by_judge), self.tie_band)

    def features_by_judge(self) -> dict[str, tuple[str, ...]]:
        """The features each judge must supply."""
        return self.features.features_by_judge()

    def to_json(self) -> dict[str, Any]:
        chosen = {"feature_set": self.feature_set, "fit_agreement": self.fit_agreement}
        return self.features.to_json() | {"kind": "pair_features", "tie_band": self.tie_band} | chosen

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PairFeatureCalibration:
        return cls(
            FeatureCalibration.from_json(data),
            float(data["tie_band"]),
            str(data.get("feature_set", "every feature")),
            {str(name): float(value) for name, value in data.get("fit_agreement", {}).items()},
        )


def fit_pair_feature_calibration(
    by_judge: dict[str, FeatureColumns], human: np.ndarray, *, seed: int
) -> PairFeatureCalibration:
    """For each of `PAIR_FEATURE_SETS`: the regression through the origin of the human majority (-1, 0, +1)
    on those feature differences (no intercept: PandaLM's labels favour the second response a little, and
    a run's pairs come in a fixed order), and the tie band with the best agreement on the fitting part's
    out-of-fold panel predictions; the set whose out-of-fold agreement is highest is kept (the first, on a
    tie)."""
    fitted: list[tuple[str, FeatureCalibration, float, float]] = []
    for name, kept in PAIR_FEATURE_SETS.items():
        columns = {
            judge: {
                feature: column
                for feature, column in own.items()
                if (kept is None or feature in kept) and feature not in ORDER_FREE_FEATURES
            }
            for judge, own in by_judge.items()
        }
        columns = {judge: own for judge, own in columns.items() if own}
        if columns:
            fitted.append((name, *_fit_pair_features(columns, human, seed=seed)))
    if not fitted:  # no judge has a feature a pair regression may use: nothing is predicted
        return PairFeatureCalibration(FeatureCalibration({}, {}, (-1.0, 1.0)), 0.0)
    name, features, band, _ = max(fitted, key=lambda candidate: candidate[3])
    return PairFeatureCalibration(features, band, name, {n: agreement for n, _, _, agreement in fitted})


def _fit_pair_features(
    by_judge: dict[str, FeatureColumns], human: np.ndarray, *, seed: int
) -> tuple[FeatureCalibration, float, float]:
    """The ridge panel on these columns, its tie band and its out-of-fold agreement at that band."""
    features = fit_ridge_panel(by_judge, human, (-1.0, 1.0), seed=seed, through_origin=True)
    cross_fitted = [
        np.clip(out_of_fold(columns, human, seed=seed, through_origin=True), -1.0, 1.0)
        for judge, columns in by_judge.items()
        if judge in features.judges
    ]
    if not cross_fitted:
        return features, 0.0, 0.0
    with np.errstate(invalid="ignore"):
        score = np.nanmean(np.vstack(cross_fitted), axis=0)

    def agreement(band: float) -> float:
        decided = decide(score, band)
        present = np.isfinite(decided) & np.isfinite(human)
        return float(np.mean(decided[present] == human[present])) if present.any() else 0.0

    band = max(PAIR_TIE_BANDS, key=agreement)
    return features, band, agreement(band)
