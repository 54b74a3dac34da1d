"""How a probability-reading panel's features become one score: chosen on the fitting part only.

A regression over a few dozen features per judge needs more labels than a user usually brings: with
150 items the per-judge ridge spread its weight over follow-ups that fitted noise and lost most of the
one feature that carried the signal. So the regression is only one candidate among simpler ones:

- `panel mean`: each judge's summary feature (the template's score), standardised and averaged: it
  needs no label but for its line onto the human scale. Its direction is the template's (a summary
  rises with quality by design), not the fitting part's: where the signal is faint (DSTC9), a few
  dozen labels turn a judge the wrong way as often as not;
- `top 1`: the feature, of any judge, whose rank correlation with the humans is largest on the rows
  fitted, turned the way those rows show (the fit-best feature);
- `ridge`: the per-judge monotone ridge and its panel weights (`features.fit_ridge_panel`);
- `mean + ridge`: the two averaged with equal weight, each standardised on the rows fitted (`Blend`);
  where the ridge is short of rows (its features + 2), the mean alone.

Each candidate is scored by repeated K-fold cross-validation inside the fitting part (refitted,
its feature chosen again, without each fold; the Spearman of the pooled out-of-fold predictions).
The default is the better-scoring of the blend and the panel mean, a tie going to the blend (inside
the folds of fifty labels the ridge cannot be fitted, so there the blend is the mean; fitted on all
fifty, the ridge joins it). The mean and the ridge err differently: on FED and USR, at 50 to 150
labels, the blend held out at or above the mean and the fit-best feature. Where every feature carries
the same little (the tests' synthetic FED-like tables) the mean alone is best, and it scores so. With
fifty labels the scores move with noise as much as with merit, so a challenger (`top 1`, where one
feature carries it all, as on the issue's coherence set; the ridge alone, where there are labels
enough to weigh every feature) replaces the default only if it leads it by more than half a bootstrap
standard error of the paired difference (`MARGIN`).

Weighed on FED's and USR's stored features and on synthetic tables, and dropped
(bench_results/notes/judging-calibration.md, "Combining features with few labels"): averages of the k
best features and of the judges' PMIs, which noise chose at 50 labels and which then held out below the
plain mean; the ridge as the default, which kept a poor ridge where one feature carried the signal; the
panel mean alone as the default, which lost the blend's gain and fell under itself where a challenger
won by noise; the blend alone as the default, which kept a poor ridge in the blend where the mean alone
was best; the best score winning outright, which chose the fit-best feature by noise where the mean was
better; and a full standard error, which kept the default where one feature was needed. The choice is
refitted on the whole fitting part; everything here sees the fitting part only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from appliance.calibration.features import FOLDS, FeatureCalibration, FeatureColumns, fit_ridge_panel, fold_ids
from appliance.util.agreement import spearman, spearman_columns

#: cross-validation repeats (each a new fold assignment) that score a candidate
REPEATS = 3
#: a fitted candidate replaces the panel mean only if it leads it by more than this many bootstrap standard
#: errors of the paired difference (0: the best score wins)
MARGIN = 0.5
#: bootstrap resamples of that standard error
LEAD_RESAMPLES = 300
PANEL_MEAN, FIT_BEST, RIDGE, BLEND = "panel mean", "top 1", "ridge", "mean + ridge"
#: the combinations that need no more labels than the mean: the better-scoring one is kept unless a
#: challenger leads it by the margin
DEFAULTS = (BLEND, PANEL_MEAN)
CHALLENGERS = (FIT_BEST, RIDGE)
#: the least slope of a line that must keep its score's order
KEEP_ORDER = 1e-9
Term = tuple[str, str]
ByJudge = dict[str, FeatureColumns]


class _Lined:
    """A score mapped onto the human scale by a line."""

    slope: float
    intercept: float
    human_scale: tuple[float, float]

    def score(self, by_judge: ByJudge) -> np.ndarray:
        raise NotImplementedError

    def predict(self, by_judge: ByJudge) -> np.ndarray:
        """On the human scale (clipped to it); NaN for a row the score leaves out."""
        predicted: np.ndarray = np.clip(self.intercept + self.slope * self.score(by_judge), *self.human_scale)
        return predicted


@dataclass(frozen=True)
class FeatureAverage(_Lined):
    """The mean of standardised features (judge, feature), each turned the way the fitting part shows,
    mapped linearly onto the human scale. A row missing some features averages the ones it has."""

    terms: tuple[Term, ...]
    center: tuple[float, ...]
    scale: tuple[float, ...]
    signs: tuple[float, ...]
    slope: float
    intercept: float
    human_scale: tuple[float, float]
    #: the candidate this came from, e.g. "top 1"
    label: str

    def score(self, by_judge: ByJudge) -> np.ndarray:
        """The average of the oriented standardised features, before the map to the human scale."""
        size = _rows(by_judge)
        return _mean_present(
            [
                sign * (_column(by_judge, term, size) - center) / scale
                for term, center, scale, sign in zip(self.terms, self.center, self.scale, self.signs, strict=True)
            ]
        )

    def features_by_judge(self) -> dict[str, tuple[str, ...]]:
        """The features each judge must supply."""
        found: dict[str, list[str]] = {}
        for judge, name in self.terms:
            found.setdefault(judge, []).append(name)
        return {judge: tuple(names) for judge, names in found.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "feature_average",
            "terms": [list(term) for term in self.terms],
            "center": list(self.center),
            "scale": list(self.scale),
            "signs": list(self.signs),
            "slope": self.slope,
            "intercept": self.intercept,
            "human_scale": list(self.human_scale),
            "label": self.label,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FeatureAverage:
        low, high = data["human_scale"]
        return cls(
            tuple((str(judge), str(name)) for judge, name in data["terms"]),
            tuple(map(float, data["center"])),
            tuple(map(float, data["scale"])),
            tuple(map(float, data["signs"])),
            float(data["slope"]),
            float(data["intercept"]),
            (float(low), float(high)),
            str(data["label"]),
        )


@dataclass(frozen=True)
class Blend(_Lined):
    """Fitted combinations averaged with equal weight, each prediction standardised on the fitting part,
    mapped linearly onto the human scale (never falling). A row missing some parts averages the others."""

    parts: tuple[FeatureAverage | FeatureCalibration, ...]
    center: tuple[float, ...]
    scale: tuple[float, ...]
    slope: float
    intercept: float
    human_scale: tuple[float, float]
    label: str

    def score(self, by_judge: ByJudge) -> np.ndarray:
        """The average of the parts' standardised predictions, before the map to the human scale."""
        return _mean_present(
            [
                (part.predict(by_judge) - center) / scale
                for part, center, scale in zip(self.parts, self.center, self.scale, strict=True)
            ]
        )

    def features_by_judge(self) -> dict[str, tuple[str, ...]]:
        """The features each judge must supply to any part."""
        found: dict[str, dict[str, None]] = {}
        for part in self.parts:
            for judge, names in part.features_by_judge().items():
                found.setdefault(judge, {}).update(dict.fromkeys(names))
        return {judge: tuple(names) for judge, names in found.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "blend",
            "parts": [part.to_json() for part in self.parts],
            "center": list(self.center),
            "scale": list(self.scale),
            "slope": self.slope,
            "intercept": self.intercept,
            "human_scale": list(self.human_scale),
            "label": self.label,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Blend:
        low, high = data["human_scale"]
        parts = tuple(
            FeatureAverage.from_json(part) if part["kind"] == "feature_average" else FeatureCalibration.from_json(part)
            for part in data["parts"]
        )
        return cls(
            parts,
            tuple(map(float, data["center"])),
            tuple(map(float, data["scale"])),
            float(data["slope"]),
            float(data["intercept"]),
            (float(low), float(high)),
            str(data["label"]),
        )


FeaturePanel = FeatureAverage | FeatureCalibration | Blend


def ridge_part(model: FeaturePanel) -> FeatureCalibration | None:
    """The per-judge ridge panel this combination is or blends, if any."""
    if isinstance(model, Blend):
        return next((part for part in model.parts if isinstance(part, FeatureCalibration)), None)
    return model if isinstance(model, FeatureCalibration) else None


def _mean_present(columns: list[np.ndarray]) -> np.ndarray:
    """Per row, the mean of the columns present there; NaN where none is."""
    stacked = np.vstack(columns)
    present = np.isfinite(stacked).any(axis=0)
    with np.errstate(invalid="ignore"):
        means = np.nanmean(np.where(present, stacked, 0.0), axis=0)
    result: np.ndarray = np.where(present, means, np.nan)
    return result


def _line(score: np.ndarray, human: np.ndarray, human_scale: tuple[float, float], floor: float) -> tuple[float, float]:
    """The least-squares line (slope, intercept) from the score onto the human values, its slope at least
    `floor`; flat at the human mean where the score cannot place a line."""
    present = np.isfinite(score) & np.isfinite(human)
    if present.sum() < 2 or np.ptp(score[present]) == 0:
        return 0.0, float(np.mean(human[present])) if present.any() else float(np.mean(human_scale))
    centred = score[present] - score[present].mean()
    slope = max(floor, float(centred @ (human[present] - human[present].mean()) / (centred @ centred)))
    return slope, float(human[present].mean() - slope * score[present].mean())


def _rows(by_judge: ByJudge) -> int:
    return len(next(iter(next(iter(by_judge.values())).values())))


def _column(by_judge: ByJudge, term: Term, size: int) -> np.ndarray:
    judge, name = term
    return by_judge.get(judge, {}).get(name, np.full(size, np.nan))


def _take(by_judge: ByJudge, rows: np.ndarray) -> ByJudge:
    return {judge: {name: values[rows] for name, values in columns.items()} for judge, columns in by_judge.items()}


def fit_average(
    by_judge: ByJudge,
    human: np.ndarray,
    terms: list[Term],
    human_scale: tuple[float, float],
    label: str,
    *,
    orient: bool = True,
) -> FeatureAverage:
    """The average of these features, each standardised and (with `orient`) turned on these rows the way
    they go with the humans, and its least-squares line onto the human scale (never falling). Without
    `orient` every term keeps its own direction."""
    size = len(human)
    centers, scales, signs = [], [], []
    for term in terms:
        values = _column(by_judge, term, size)
        present = np.isfinite(values) & np.isfinite(human)
        centers.append(float(np.mean(values[present])) if present.any() else 0.0)
        spread = float(np.std(values[present])) if present.any() else 0.0
        scales.append(spread if spread > 1e-12 else 1.0)
        falls = orient and (spearman(values[present], human[present]) or 0.0) < 0
        signs.append(-1.0 if falls else 1.0)
    unmapped = FeatureAverage(tuple(terms), tuple(centers), tuple(scales), tuple(signs), 1.0, 0.0, human_scale, label)
    # unturned terms keep their order even where these rows show it falling (a flat line would lose it)
    slope, intercept = _line(unmapped.score(by_judge), human, human_scale, 0.0 if orient else KEEP_ORDER)
    return FeatureAverage(
        tuple(terms), tuple(centers), tuple(scales), tuple(signs), slope, intercept, human_scale, label
    )


def fit_blend(
    fitted: list[FeatureAverage | FeatureCalibration],
    by_judge: ByJudge,
    human: np.ndarray,
    human_scale: tuple[float, float],
    label: str,
) -> Blend:
    """These combinations (fitted on these rows) averaged with equal weight, each standardised by its
    predictions on these rows; a part that predicts none of them (a ridge short of rows) is left out."""
    parts, centers, scales = [], [], []
    for part in fitted:
        predicted = part.predict(by_judge)
        present = np.isfinite(predicted)
        if not present.any():
            continue
        spread = float(np.std(predicted[present]))
        parts.append(part)
        centers.append(float(np.mean(predicted[present])))
        scales.append(spread if spread > 1e-12 else 1.0)
    unmapped = Blend(tuple(parts), tuple(centers), tuple(scales), 1.0, 0.0, human_scale, label)
    score = unmapped.score(by_judge) if parts else np.full(len(human), np.nan)
    slope, intercept = _line(score, human, human_scale, KEEP_ORDER)
    return Blend(tuple(parts), tuple(centers), tuple(scales), slope, intercept, human_scale, label)


def ranked_terms(by_judge: ByJudge, human: np.ndarray) -> list[tuple[Term, float]]:
    """Every (judge, feature) with its rank correlation with the humans on the rows where every feature and
    the human value are present, strongest (in either direction) first; ties in name order."""
    terms = sorted((judge, name) for judge, columns in by_judge.items() for name in columns)
    if not terms:
        return []
    matrix = np.column_stack([by_judge[judge][name] for judge, name in terms])
    complete = np.isfinite(matrix).all(axis=1) & np.isfinite(human)
    correlations = np.nan_to_num(spearman_columns(matrix[complete], human[complete]))
    order = sorted(range(len(terms)), key=lambda k: (-abs(correlations[k]), terms[k]))
    return [(terms[k], float(correlations[k])) for k in order]


Candidate = Callable[[ByJudge, np.ndarray], FeaturePanel]
Model = TypeVar("Model")


def _memoised(fit: Callable[[ByJudge, np.ndarray], Model]) -> Callable[[ByJudge, np.ndarray], Model]:
    """`fit`, computed once per distinct input: the blend needs the ridge fitted on the very rows the
    ridge candidate was just fitted on, and the ridge is the costly fit."""
    cache: dict[bytes, Model] = {}

    def cached(by_judge: ByJudge, human: np.ndarray) -> Model:
        digest = hashlib.blake2b(np.ascontiguousarray(human).tobytes())
        for judge in sorted(by_judge):
            for name in sorted(by_judge[judge]):
                digest.update(f"{judge}\0{name}\0".encode())
                digest.update(np.ascontiguousarray(by_judge[judge][name]).tobytes())
        key = digest.digest()
        if key not in cache:
            cache[key] = fit(by_judge, human)
        return cache[key]

    return cached


def candidates(
    by_judge: ByJudge, human_scale: tuple[float, float], *, summary: str | None, seed: int
) -> dict[str, Candidate]:
    """The combinations weighed, simplest first (see the module docstring); each refits from its rows."""
    shared = set.intersection(*(set(columns) for columns in by_judge.values())) if by_judge else set()
    found: dict[str, Candidate] = {}
    summaries = [(judge, summary) for judge in sorted(by_judge)] if summary is not None and summary in shared else []

    def mean(x: ByJudge, y: np.ndarray) -> FeatureAverage:
        return fit_average(x, y, summaries, human_scale, PANEL_MEAN, orient=False)

    @_memoised
    def ridge(x: ByJudge, y: np.ndarray) -> FeatureCalibration:
        return fit_ridge_panel(x, y, human_scale, seed=seed)

    if summaries:
        found[PANEL_MEAN] = mean
    if any(by_judge.values()):
        found[FIT_BEST] = lambda x, y: fit_average(x, y, [ranked_terms(x, y)[0][0]], human_scale, FIT_BEST)
    found[RIDGE] = ridge
    if summaries:
        found[BLEND] = lambda x, y: fit_blend([mean(x, y), ridge(x, y)], x, y, human_scale, BLEND)
    return found


def out_of_fold(candidate: Candidate, by_judge: ByJudge, human: np.ndarray, *, seed: int, repeats: int) -> np.ndarray:
    """One row per repeat (a new fold assignment): each labelled item predicted by the candidate refitted
    without its fold (columns: the items with a human value, in order)."""
    rows = np.where(np.isfinite(human))[0]
    folds = min(FOLDS, len(rows))
    predicted = np.full((repeats, len(rows)), np.nan)
    for repeat in range(repeats):
        assignment = fold_ids(len(rows), folds, seed + 7919 * (repeat + 1))
        for fold in range(folds):
            train, test = rows[assignment != fold], rows[assignment == fold]
            model = candidate(_take(by_judge, train), human[train])
            predicted[repeat, assignment == fold] = model.predict(_take(by_judge, test))
    return predicted


def _pooled_spearman(predicted: np.ndarray, human: np.ndarray) -> float | None:
    present = np.isfinite(predicted) & np.isfinite(human)
    return spearman(predicted[present], human[present])


def cross_validated_spearman(predicted: np.ndarray, human: np.ndarray) -> float | None:
    """The mean over repeats of the Spearman of the out-of-fold predictions pooled over the folds."""
    values = [value for row in predicted if (value := _pooled_spearman(row, human)) is not None]
    return float(np.mean(values)) if values else None


def lead_standard_error(challenger: np.ndarray, default: np.ndarray, human: np.ndarray, *, seed: int) -> float:
    """The bootstrap standard error, over items, of the challenger's Spearman minus the default's (each the
    mean of its out-of-fold predictions over the repeats): how much of a lead noise alone would give."""
    with np.errstate(invalid="ignore"):
        first, second = np.nanmean(challenger, axis=0), np.nanmean(default, axis=0)
    rng = np.random.default_rng(seed)
    differences = []
    for _ in range(LEAD_RESAMPLES):
        rows = rng.integers(0, len(human), size=len(human))
        a, b = _pooled_spearman(first[rows], human[rows]), _pooled_spearman(second[rows], human[rows])
        if a is not None and b is not None:
            differences.append(a - b)
    return float(np.std(differences)) if len(differences) > 1 else float("inf")


@dataclass(frozen=True)
class Combination:
    """The candidate chosen, refitted on the whole fitting part, what every candidate scored, and the best
    challenger's lead over the default with its standard error (None without a default)."""

    model: FeaturePanel
    chosen: str
    cross_validated: dict[str, float | None] = field(default_factory=dict)
    lead: float | None = None
    standard_error: float | None = None
    default: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen,
            "cross_validated_spearman": self.cross_validated,
            "default": self.default,
            "lead_over_default": self.lead,
            "standard_error": self.standard_error,
            "margin": MARGIN,
        }


def fit_feature_calibration(
    by_judge: ByJudge,
    human: np.ndarray,
    human_scale: tuple[float, float],
    *,
    summary: str | None,
    seed: int,
    repeats: int = REPEATS,
    margin: float = MARGIN,
) -> Combination:
    """The panel mean, unless the best-scoring fitted candidate (cross-validated inside the fitting part)
    leads it by more than `margin` bootstrap standard errors; without a panel mean, the best score."""
    options = candidates(by_judge, human_scale, summary=summary, seed=seed)
    labelled = human[np.isfinite(human)]
    predicted = {
        name: out_of_fold(candidate, by_judge, human, seed=seed, repeats=repeats) for name, candidate in options.items()
    }
    scores = {name: cross_validated_spearman(values, labelled) for name, values in predicted.items()}
    # the first of the defaults scored wins a tie: inside the folds of 50 labels the blend is the mean
    defaults = [name for name in DEFAULTS if name in options and scores[name] is not None]
    default = max(defaults, key=lambda name: scores[name] or 0.0) if defaults else None
    fitted = [name for name in CHALLENGERS if name in options and scores[name] is not None]
    best = max(fitted, key=lambda name: scores[name] or 0.0) if fitted else RIDGE
    prior = scores.get(default) if default else None
    if default is None or prior is None or not fitted:
        return Combination(options[best](by_judge, human), best, scores)
    lead = (scores[best] or 0.0) - prior
    error = lead_standard_error(predicted[best], predicted[default], labelled, seed=seed)
    chosen = best if lead > margin * error else default
    return Combination(options[chosen](by_judge, human), chosen, scores, lead, error, default)
