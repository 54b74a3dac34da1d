"""Held-out agreement of judges, panels and baselines with humans, each with a bootstrap interval.

Rows reported:
- each judge: raw scores linearly rescaled to the human scale (so MAE and
  alpha are meaningful), and under `calibrated` its own isotonic map;
- `panel_mean`: the plain mean of the rescaled judges (probability-reading
  judges: of their standardised summaries, in the template's direction, on a
  line: the combiner's `panel mean` candidate);
- `panel_calibrated`: the fitted calibration;
- `human_ceiling`: each annotator against the mean (pairwise: majority) of
  the others, averaged over annotators: what agreement humans reach;
- `length_baseline`: response length alone, monotone-mapped on the fitting
  part (pairwise: the longer response wins);
- probability-reading judges (a feature `Combination`): each judge's summary
  feature as its raw row, its ridge model as `calibrated` where the ridge
  panel was chosen or blended, under `features` every feature alone, monotone-mapped on
  the fitting part (its direction, too, is taken from the fitting part),
  `fit_best_feature`: the feature the fitting part ranks first, alone and
  mapped linearly (its order kept), as it fares held out, and `combiner`:
  the combination chosen and what each candidate scored in cross-validation
  inside the fitting part.

Like for like with the ceiling: every rating row also carries
`spearman_like_for_like`, the row's Spearman against the mean of all
annotators but one, averaged over the annotator left out, which is exactly
how the ceiling's annotator is compared. Intervals resample held-out items,
items that share a context together.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from appliance.calibration.combiner import (
    PANEL_MEAN,
    ByJudge,
    Combination,
    Term,
    fit_average,
    ranked_terms,
    ridge_part,
)
from appliance.calibration.features import PairFeatureCalibration, decide
from appliance.calibration.isotonic import fit_isotonic
from appliance.calibration.models import PairwiseCalibration, RatingCalibration, rescale, vote
from appliance.calibration.tables import ItemTable, majority
from appliance.util.agreement import (
    agreement,
    bootstrap_metrics,
    cohen_kappa,
    kendall_tau_b,
    krippendorff_alpha_interval,
    mae,
    pearson,
    spearman,
)

Row = dict[str, Any]
Predictor = Callable[[ItemTable], np.ndarray]
#: the name the plain panel mean gives each judge's summary score
SUMMARY = "summary"


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


def like_for_like(predicted: np.ndarray, table: ItemTable) -> float | None:
    """Spearman against the mean of all annotators but one, averaged over the one left out."""
    values = []
    for rest in table.others_means().values():
        present = np.isfinite(predicted) & np.isfinite(rest)
        value = spearman(predicted[present], rest[present])
        if value is not None:
            values.append(value)
    return float(np.mean(values)) if values else None


def monotone_map(values: np.ndarray, human: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """An isotonic map fitted on (values, human) in the direction the fitting part shows."""
    present = np.isfinite(values) & np.isfinite(human)
    direction = 1.0 if (spearman(values[present], human[present]) or 0.0) >= 0 else -1.0
    mapping = fit_isotonic(direction * values[present], human[present])

    def predict(x: np.ndarray) -> np.ndarray:
        mapped = np.interp(direction * x, mapping.xs, mapping.ys)
        return np.where(np.isfinite(x), mapped, np.nan)

    return predict


def with_intervals(
    table: ItemTable, compute: Callable[[ItemTable], dict[str, float | None]], seed: int, resamples: int
) -> Row:
    values = compute(table)
    intervals = bootstrap_metrics(
        lambda rows: compute(table.take(rows)), len(table), seed=seed, resamples=resamples, clusters=table.clusters
    )
    row: Row = {
        name: {"value": value, "ci": None if intervals.get(name) is None else list(intervals[name])}  # type: ignore[arg-type]
        for name, value in values.items()
    }
    return row


def _count(predicted: np.ndarray, human: np.ndarray) -> int:
    return int(np.count_nonzero(np.isfinite(predicted) & np.isfinite(human)))


def _rating_scorer(held: ItemTable, seed: int, resamples: int) -> Callable[[Predictor], Row]:
    def scored(predict: Predictor) -> Row:
        def compute(table: ItemTable) -> dict[str, float | None]:
            predicted = predict(table)
            return rating_metrics(predicted, table.human) | {"spearman_like_for_like": like_for_like(predicted, table)}

        row = with_intervals(held, compute, seed, resamples)
        row["n"] = _count(predict(held), held.human)
        return row

    return scored


def panel_mean_predictor(fit: ItemTable) -> Predictor:
    """The plain panel mean, exactly the combiner's `panel mean` candidate: the judges' summary scores
    standardised on the fitting part and averaged, each in its template's direction, on a line onto the
    human scale. No label turns or reorders it, so its held-out Spearman is the label-free mean's (an
    isotonic step, as this row once used, ties items: on DSTC9 it moved the figure by 0.054 to 0.058)."""
    judges = sorted(fit.judges)

    def summaries(table: ItemTable) -> ByJudge:
        return {judge: {SUMMARY: table.judges[judge]} for judge in judges}

    terms = [(judge, SUMMARY) for judge in judges]
    average = fit_average(summaries(fit), fit.human, terms, fit.annotator_range(), PANEL_MEAN, orient=False)
    return lambda table: average.predict(summaries(table))


def fit_best_feature(fit: ItemTable) -> tuple[Term, float, Predictor] | None:
    """The feature the fitting part ranks first, its Spearman there, and it alone mapped linearly onto the
    human scale (which keeps its order: the fairest view of a single feature)."""
    ranked = ranked_terms(fit.features, fit.human)
    if not ranked:
        return None
    term, fit_value = ranked[0]
    alone = fit_average(fit.features, fit.human, [term], fit.annotator_range(), "fit-best feature")
    return term, fit_value, lambda table: alone.predict(table.features)


def feature_report(fit: ItemTable, held: ItemTable, combination: Combination, *, seed: int, resamples: int) -> Row:
    """The held-out report of a probability-reading panel (see the module docstring for the rows)."""
    calibration = combination.model
    ridge = ridge_part(calibration)
    scored = _rating_scorer(held, seed, resamples)
    judges: Row = {}
    features: Row = {}
    for judge in held.judges:
        judges[judge] = scored(lambda t, f=monotone_map(fit.judges[judge], fit.human), j=judge: f(t.judges[j]))  # type: ignore[misc]
        if ridge is not None and judge in ridge.judges:
            judges[judge]["calibrated"] = scored(
                lambda t, j=judge: ridge.judge_prediction(j, t.features[j])  # type: ignore[misc]
            )
        features[judge] = {
            name: scored(lambda t, f=monotone_map(column, fit.human), j=judge, n=name: f(t.features[j][n]))  # type: ignore[misc]
            for name, column in sorted(fit.features.get(judge, {}).items())
        }
    length_map = monotone_map(fit.length, fit.human)
    best: Row = {}
    if (found := fit_best_feature(fit)) is not None:
        (best_judge, best_name), fit_value, predict = found
        best = {"judge": best_judge, "feature": best_name, "fit_spearman": fit_value} | scored(predict)
    return {
        "judges": judges,
        "features": features,
        "fit_best_feature": best,
        "combiner": combination.to_json(),
        "panel_mean": scored(panel_mean_predictor(fit)),
        "panel_calibrated": scored(lambda t: calibration.predict(t.features)),
        "human_ceiling": rating_ceiling(held, seed, resamples),
        "length_baseline": scored(lambda t: length_map(t.length)),
    }


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
    scored = _rating_scorer(held, seed, resamples)

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
    length_map = monotone_map(fit.length, fit.human)
    return {
        "judges": judges,
        "panel_mean": scored(panel_mean),
        "panel_calibrated": scored(lambda t: calibration.predict(t.judges)),
        "human_ceiling": rating_ceiling(held, seed, resamples),
        "length_baseline": scored(lambda t: length_map(t.length)),
    }


#: why a label set with one value per item has no human ceiling
NO_CEILING = "not measurable: no item carries two human values, so no rater can be compared with another"


def _ceiling_measurable(held: ItemTable) -> bool:
    """Whether some held-out item carries two annotators' values (the ceiling compares them)."""
    if len(held.annotators) < 2:
        return False
    return bool((np.isfinite(np.vstack(list(held.annotators.values()))).sum(axis=0) >= 2).any())


def rating_ceiling(held: ItemTable, seed: int, resamples: int) -> Row:
    """Each annotator against the mean of the others, averaged over annotators."""
    if not _ceiling_measurable(held):
        return {"annotators": len(held.annotators), "not_measurable": NO_CEILING}

    def compute(table: ItemTable) -> dict[str, float | None]:
        rests = table.others_means()
        per_annotator = [rating_metrics(values, rests[a]) for a, values in table.annotators.items()]
        averaged = _average(per_annotator)
        return averaged | {"spearman_like_for_like": averaged["spearman"]}

    return with_intervals(held, compute, seed, resamples) | {"annotators": len(held.annotators)}


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

        row = with_intervals(held, compute, seed, resamples)
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
    if not _ceiling_measurable(held):
        return {"annotators": len(held.annotators), "not_measurable": NO_CEILING}

    def compute(table: ItemTable) -> dict[str, float | None]:
        per_annotator = []
        for annotator, values in table.annotators.items():
            others = np.vstack([v for a, v in table.annotators.items() if a != annotator])
            rest = np.asarray([majority(others[:, i]) for i in range(len(table))])
            per_annotator.append(pairwise_metrics(values, rest))
        return _average(per_annotator)

    return with_intervals(held, compute, seed, resamples) | {"annotators": len(held.annotators)}


def pair_feature_report(
    fit: ItemTable, held: ItemTable, calibration: PairFeatureCalibration, *, seed: int, resamples: int
) -> Row:
    """Pairwise rows for probability-reading judges: each judge's calibrated preference, every feature
    difference alone (its sign, oriented on the fitting part), the panels, the ceiling and the length rule."""

    def scored(predict: Predictor) -> Row:
        row = with_intervals(held, lambda t: pairwise_metrics(predict(t), t.human), seed, resamples)
        row["n"] = _count(predict(held), held.human)
        return row

    def oriented(values: np.ndarray) -> float:
        present = np.isfinite(values) & np.isfinite(fit.human)
        return 1.0 if (spearman(values[present], fit.human[present]) or 0.0) >= 0 else -1.0

    band = calibration.tie_band
    judges: Row = {}
    features: Row = {}
    for judge in held.features:
        if judge in calibration.features.judges:
            judges[judge] = scored(
                lambda t, j=judge: decide(calibration.features.judge_prediction(j, t.features[j]), band)  # type: ignore[misc]
            )
        features[judge] = {
            name: scored(lambda t, j=judge, n=name, d=oriented(column): decide(d * t.features[j][n], 0.0))  # type: ignore[misc]
            for name, column in sorted(fit.features[judge].items())
        }
    summary_signs = {j: oriented(fit.judges[j]) for j in fit.judges}

    def panel_mean(table: ItemTable) -> np.ndarray:
        votes = np.vstack([summary_signs[j] * np.sign(table.judges[j]) for j in table.judges])
        with np.errstate(invalid="ignore"):
            return decide(np.nanmean(votes, axis=0), 0.0)

    return {
        "judges": judges,
        "features": features,
        "panel_mean": scored(panel_mean),
        "panel_calibrated": scored(lambda t: calibration.predict(t.features)),
        "human_ceiling": _pairwise_ceiling(held, seed, resamples),
        "length_baseline": scored(lambda t: t.length),
    }
