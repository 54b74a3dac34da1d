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
- `ridge`: the per-judge monotone ridge and its panel weights (`features.fit_ridge_panel`).

Each candidate is scored by repeated K-fold cross-validation inside the fitting part (refitted,
its feature chosen again, without each fold; the Spearman of the pooled out-of-fold predictions).
Three candidates, each the best of its kind where the data favour it: the mean where every follow-up
carries a little (FED), one feature where one carries it all (the issue's coherence set), the ridge
where there are labels enough to weigh them. With fifty labels the scores move with noise as much as
with merit, so the panel mean, which needs no labels, is kept unless the better-scoring fitted
candidate leads it by more than half a bootstrap standard error of the paired difference (`MARGIN`).

Weighed on FED's stored features and on synthetic tables, and dropped (docs/judging.md, "Combining
features with few labels"): averages of the k best features and of the judges' PMIs, which noise
chose at 50 labels and which then held out below the plain mean; the ridge as the incumbent, which
kept a poor ridge where one feature carried the signal; the best score winning outright, which chose
the fit-best feature by noise where the mean was better; and a full standard error, which kept the
mean where one feature was needed. The choice is refitted on the whole fitting part; everything here
sees the fitting part only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from appliance.calibration.features import FOLDS, FeatureCalibration, FeatureColumns, fit_ridge_panel, fold_ids
from appliance.calibration.metrics import spearman, spearman_columns

#: cross-validation repeats (each a new fold assignment) that score a candidate
REPEATS = 3
#: a fitted candidate replaces the panel mean only if it leads it by more than this many bootstrap standard
#: errors of the paired difference (0: the best score wins)
MARGIN = 0.5
#: bootstrap resamples of that standard error
LEAD_RESAMPLES = 300
PANEL_MEAN, FIT_BEST, RIDGE = "panel mean", "top 1", "ridge"
Term = tuple[str, str]
ByJudge = dict[str, FeatureColumns]


@dataclass(frozen=True)
class FeatureAverage:
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
        columns = [
            sign * (_column(by_judge, term, size) - center) / scale
            for term, center, scale, sign in zip(self.terms, self.center, self.scale, self.signs, strict=True)
        ]
        stacked = np.vstack(columns)
        present = np.isfinite(stacked).any(axis=0)
        with np.errstate(invalid="ignore"):
            means = np.nanmean(np.where(present, stacked, 0.0), axis=0)
        result: np.ndarray = np.where(present, means, np.nan)
        return result

    def predict(self, by_judge: ByJudge) -> np.ndarray:
        """On the human scale (clipped to it); NaN for a row with none of the features."""
        predicted: np.ndarray = np.clip(self.intercept + self.slope * self.score(by_judge), *self.human_scale)
        return predicted

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


FeaturePanel = FeatureAverage | FeatureCalibration


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
    score = unmapped.score(by_judge)
    present = np.isfinite(score) & np.isfinite(human)
    slope, intercept = 0.0, float(np.mean(human[present])) if present.any() else float(np.mean(human_scale))
    if present.sum() >= 2 and np.ptp(score[present]) > 0:
        centred = score[present] - score[present].mean()
        # unturned terms keep their order even where these rows show it falling (a flat line would lose it)
        slope = max(
            0.0 if orient else 1e-9, float(centred @ (human[present] - human[present].mean()) / (centred @ centred))
        )
        intercept = float(human[present].mean() - slope * score[present].mean())
    return FeatureAverage(
        tuple(terms), tuple(centers), tuple(scales), tuple(signs), slope, intercept, human_scale, label
    )


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


def candidates(
    by_judge: ByJudge, human_scale: tuple[float, float], *, summary: str | None, seed: int
) -> dict[str, Candidate]:
    """The combinations weighed, simplest first (see the module docstring); each refits from its rows."""
    shared = set.intersection(*(set(columns) for columns in by_judge.values())) if by_judge else set()
    found: dict[str, Candidate] = {}
    if summary is not None and summary in shared:
        summaries = [(judge, summary) for judge in sorted(by_judge)]
        found[PANEL_MEAN] = lambda x, y: fit_average(x, y, summaries, human_scale, PANEL_MEAN, orient=False)
    if any(by_judge.values()):
        found[FIT_BEST] = lambda x, y: fit_average(x, y, [ranked_terms(x, y)[0][0]], human_scale, FIT_BEST)
    found[RIDGE] = lambda x, y: fit_ridge_panel(x, y, human_scale, seed=seed)
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
    fitted candidate's lead over the panel mean with its standard error (None without a panel mean)."""

    model: FeaturePanel
    chosen: str
    cross_validated: dict[str, float | None] = field(default_factory=dict)
    lead: float | None = None
    standard_error: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen,
            "cross_validated_spearman": self.cross_validated,
            "lead_over_panel_mean": self.lead,
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
    fitted = [name for name in options if name != PANEL_MEAN and scores[name] is not None]
    best = max(fitted, key=lambda name: scores[name] or 0.0) if fitted else RIDGE
    prior = scores.get(PANEL_MEAN)
    if prior is None or not fitted:
        return Combination(options[best](by_judge, human), best, scores)
    lead = (scores[best] or 0.0) - prior
    error = lead_standard_error(predicted[best], predicted[PANEL_MEAN], labelled, seed=seed)
    chosen = best if lead > margin * error else PANEL_MEAN
    return Combination(options[chosen](by_judge, human), chosen, scores, lead, error)
