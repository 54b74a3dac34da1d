"""How a probability-reading panel's features become one score: chosen on the fitting part only.

A regression over a few dozen features per judge needs more labels than a user usually brings: with
150 items the per-judge ridge spread its weight over follow-ups that fitted noise and lost most of the
one feature that carried the signal. So the regression is only one candidate among simpler ones:

- `panel mean`: each judge's summary feature (the template's score), standardised and averaged;
- `pmi`: each judge's PMI feature, averaged (a group declared before any label is seen);
- `top k`: the k features, of any judge, whose rank correlation with the humans is largest on the
  rows fitted, each in the direction those rows show, averaged (k = 1 is the best single feature);
- `ridge`: the per-judge monotone ridge and its panel weights (`features.fit_ridge_panel`).

Each candidate is scored by repeated K-fold cross-validation inside the fitting part (refitted,
features chosen again, without each fold; the Spearman of the pooled out-of-fold predictions). With
a hundred labels those scores differ by noise as much as by merit, so the choice is two duels in
which the incumbent is kept unless the challenger leads by more than one bootstrap standard error of
the paired difference over the items: first the best-scoring average against the best single feature
(`top 1`), then the winner against the ridge panel (the incumbent: on FED it holds out best). The
choice is refitted on the whole fitting part; everything here sees the fitting part only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from appliance.calibration.features import FOLDS, FeatureCalibration, FeatureColumns, fit_ridge_panel, fold_ids
from appliance.calibration.metrics import spearman, spearman_columns

#: the numbers of best-ranked features averaged by the `top k` candidates (and all of them)
TOP_COUNTS = (1, 2, 3, 5, 8, 13, 21)
#: cross-validation repeats (each a new fold assignment) that score a candidate
REPEATS = 3
#: bootstrap resamples that tell a challenger's lead over the default from noise
LEAD_RESAMPLES = 300
PANEL_MEAN, PMI, RIDGE = "panel mean", "pmi", "ridge"
#: the average kept unless another clearly beats it: the feature the fitting part ranks first
DEFAULT = "top 1"
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
    #: the candidate this came from, e.g. "top 3"
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
    by_judge: ByJudge, human: np.ndarray, terms: list[Term], human_scale: tuple[float, float], label: str
) -> FeatureAverage:
    """The average of these features, each oriented and standardised on these rows, and its least-squares
    line onto the human scale (never falling: the terms are already turned to rise with the humans)."""
    size = len(human)
    centers, scales, signs = [], [], []
    for term in terms:
        values = _column(by_judge, term, size)
        present = np.isfinite(values) & np.isfinite(human)
        centers.append(float(np.mean(values[present])) if present.any() else 0.0)
        spread = float(np.std(values[present])) if present.any() else 0.0
        scales.append(spread if spread > 1e-12 else 1.0)
        signs.append(1.0 if (spearman(values[present], human[present]) or 0.0) >= 0 else -1.0)
    unmapped = FeatureAverage(tuple(terms), tuple(centers), tuple(scales), tuple(signs), 1.0, 0.0, human_scale, label)
    score = unmapped.score(by_judge)
    present = np.isfinite(score) & np.isfinite(human)
    slope, intercept = 0.0, float(np.mean(human[present])) if present.any() else float(np.mean(human_scale))
    if present.sum() >= 2 and np.ptp(score[present]) > 0:
        centred = score[present] - score[present].mean()
        slope = max(0.0, float(centred @ (human[present] - human[present].mean()) / (centred @ centred)))
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
    judges = sorted(by_judge)
    shared = set.intersection(*(set(columns) for columns in by_judge.values())) if by_judge else set()
    found: dict[str, Candidate] = {}
    if summary is not None and summary in shared:
        summaries = [(judge, summary) for judge in judges]
        found[PANEL_MEAN] = lambda x, y: fit_average(x, y, summaries, human_scale, PANEL_MEAN)
    if PMI in shared:
        pmis = [(judge, PMI) for judge in judges]
        found[PMI] = lambda x, y: fit_average(x, y, pmis, human_scale, PMI)
    total = sum(len(columns) for columns in by_judge.values())
    for count in [k for k in TOP_COUNTS if k < total] + [total]:
        label = f"top {count}"

        def top(x: ByJudge, y: np.ndarray, count: int = count, label: str = label) -> FeaturePanel:
            return fit_average(x, y, [term for term, _ in ranked_terms(x, y)[:count]], human_scale, label)

        found[label] = top
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
class Duel:
    """An incumbent kept unless its best-scoring challenger leads it by more than one standard error."""

    incumbent: str
    challenger: str | None
    winner: str
    lead: float | None
    standard_error: float | None


@dataclass(frozen=True)
class Combination:
    """The candidate chosen, refitted on the whole fitting part, what every candidate scored, and the duels
    that chose it."""

    model: FeaturePanel
    chosen: str
    cross_validated: dict[str, float | None] = field(default_factory=dict)
    duels: tuple[Duel, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen,
            "cross_validated_spearman": self.cross_validated,
            "duels": [
                {
                    "incumbent": d.incumbent,
                    "challenger": d.challenger,
                    "winner": d.winner,
                    "lead": d.lead,
                    "standard_error": d.standard_error,
                }
                for d in self.duels
            ],
        }


def fit_feature_calibration(
    by_judge: ByJudge,
    human: np.ndarray,
    human_scale: tuple[float, float],
    *,
    summary: str | None,
    seed: int,
    repeats: int = REPEATS,
) -> Combination:
    """Two duels, each won by the challenger only with a lead over one standard error: among the averages,
    the best-scoring one against the fit-best feature; then the winner against the ridge panel."""
    options = candidates(by_judge, human_scale, summary=summary, seed=seed)
    labelled = human[np.isfinite(human)]
    predicted = {
        name: out_of_fold(candidate, by_judge, human, seed=seed, repeats=repeats) for name, candidate in options.items()
    }
    scores = {name: cross_validated_spearman(values, labelled) for name, values in predicted.items()}

    def duel(incumbent: str, challengers: list[str]) -> Duel:
        present = [name for name in challengers if scores[name] is not None]
        if not present:
            return Duel(incumbent, None, incumbent, None, None)
        challenger = max(present, key=lambda name: scores[name] or 0.0)  # the first of equals: the simpler
        if scores[incumbent] is None:
            return Duel(incumbent, challenger, challenger, None, None)
        lead = (scores[challenger] or 0.0) - (scores[incumbent] or 0.0)
        error = lead_standard_error(predicted[challenger], predicted[incumbent], labelled, seed=seed)
        return Duel(incumbent, challenger, challenger if lead > error else incumbent, lead, error)

    averages = duel(DEFAULT, [name for name in options if name not in (DEFAULT, RIDGE)])
    final = duel(RIDGE, [averages.winner])
    return Combination(options[final.winner](by_judge, human), final.winner, scores, (averages, final))
