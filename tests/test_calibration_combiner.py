"""Combining a probability-reading panel's features with few labels: the exact monotone ridge, the
vectorised ranks, feature averages, the choice among candidates and the learning curve."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from appliance.calibration import combiner
from appliance.calibration.combiner import (
    BLEND,
    PANEL_MEAN,
    REPEATS,
    Blend,
    ByJudge,
    FeatureAverage,
    candidates,
    fit_average,
    fit_blend,
    fit_feature_calibration,
    ranked_terms,
)
from appliance.calibration.curve import curve_cells, learning_curve
from appliance.calibration.features import FOLDS, FeatureCalibration, fit_ridge_panel, nonnegative_quadratic_minimum
from appliance.calibration.heldout import panel_mean_predictor
from appliance.calibration.models import calibration_from_json
from appliance.calibration.tables import ItemTable, split_items
from appliance.util.agreement import rank, rank_columns, spearman, spearman_columns
from appliance.view.figures import calibration_figures

JUDGES = ("gemma3-270m", "smollm2-135m")
FOLLOW_UPS = [f"positive_{i}" for i in range(1, 17)] + [f"negative_{i}" for i in range(1, 17)]


def judged_items(size: int, seed: int, *, signal: float = 0.8) -> tuple[ByJudge, np.ndarray]:
    """Features the way the issue found them: one judge's PMI tracks the humans; 38 features per judge move
    together with a nuisance (say, length) and carry only a trace of the quality."""
    rng = np.random.default_rng(seed)
    quality = rng.normal(size=size)
    human = np.clip(np.round(3.0 + 0.9 * quality + rng.normal(scale=0.6, size=size)), 1.0, 5.0)
    by_judge: ByJudge = {}
    for judge in JUDGES:
        nuisance = rng.normal(size=size)
        by_judge[judge] = {}
        for name in ["followup", "logprob", "pmi", "prior", "tokens", *FOLLOW_UPS]:
            weight = signal if (judge, name) == ("gemma3-270m", "pmi") else 0.1
            by_judge[judge][name] = weight * quality + 0.8 * nuisance + rng.normal(size=size)
    return by_judge, human


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=12), st.integers(min_value=0, max_value=2**32 - 1))
def test_the_exact_monotone_ridge_meets_its_optimality_conditions(size: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    matrix = rng.normal(size=(size + 3, size))
    hessian = matrix.T @ matrix + rng.uniform(0.01, 10.0) * np.eye(size)
    linear = rng.normal(size=size) * rng.choice([0.01, 1.0, 100.0])
    weights = nonnegative_quadratic_minimum(hessian, linear)
    gradient = hessian @ weights - linear
    tolerance = 1e-8 * (1.0 + np.abs(linear).max())
    assert (weights >= 0).all()
    assert (gradient >= -tolerance).all()  # no direction that may still move lowers the quadratic
    assert np.abs(gradient[weights > 0]).max(initial=0.0) <= tolerance  # free weights sit at the minimum


@settings(max_examples=100, deadline=None)
@given(
    arrays(
        np.float64, st.tuples(st.integers(1, 15), st.integers(1, 4)), elements=st.sampled_from([-1.0, 0.0, 2.5, 7.0])
    )
)
def test_ranks_of_all_columns_at_once_equal_one_column_at_a_time(matrix: np.ndarray) -> None:
    ranks = rank_columns(matrix)
    for column in range(matrix.shape[1]):
        assert ranks[:, column].tolist() == rank(matrix[:, column]).tolist()
    target = np.arange(matrix.shape[0], dtype=float) % 3
    expected = [spearman(matrix[:, k], target) for k in range(matrix.shape[1])]
    assert spearman_columns(matrix, target) == pytest.approx(
        [np.nan if value is None else value for value in expected], nan_ok=True, abs=1e-12
    )


def test_a_feature_average_orients_standardises_and_averages_what_a_row_has() -> None:
    human = np.asarray([1.0, 2.0, 3.0, 4.0, 5.0])
    by_judge: ByJudge = {"a": {"up": np.asarray([10.0, 20.0, 30.0, 40.0, 50.0])}, "b": {"down": -human}}
    model = fit_average(by_judge, human, [("a", "up"), ("b", "down")], (1.0, 5.0), "two features")
    assert model.signs == (1.0, -1.0) and model.center == (30.0, -3.0)
    assert model.predict(by_judge).tolist() == pytest.approx(human.tolist())  # both terms are the human, rescaled
    # A row without judge b's feature averages judge a's alone; one without either is NaN.
    partial = {"a": {"up": np.asarray([50.0, np.nan])}, "b": {"down": np.asarray([np.nan, np.nan])}}
    assert model.predict(partial)[0] == pytest.approx(5.0) and np.isnan(model.predict(partial)[1])
    again = FeatureAverage.from_json(model.to_json())
    assert again == model and again.features_by_judge() == {"a": ("up",), "b": ("down",)}


def test_the_panel_mean_keeps_each_summarys_own_direction_whatever_the_fitting_rows_show() -> None:
    """DSTC9's lesson: where the humans hardly agree, the fitting part turns a judge's summary the wrong way
    about as often as not, and a panel mean oriented on it fell below the plain mean held out. A summary
    rises with quality by design; the panel mean keeps that direction, and its order where both fall."""
    human = np.asarray([1.0, 2.0, 3.0, 4.0, 5.0])
    summary = "followup"
    one_falls: ByJudge = {"a": {summary: 2 * human}, "b": {summary: -human}}
    panel_mean = candidates(one_falls, (1.0, 5.0), summary=summary, seed=0)[PANEL_MEAN]
    model = panel_mean(one_falls, human)
    assert isinstance(model, FeatureAverage) and model.signs == (1.0, 1.0)
    both_fall: ByJudge = {"a": {summary: -human}, "b": {summary: -3 * human}}
    falling = panel_mean(both_fall, human).predict(both_fall)
    assert (np.diff(falling) < 0).all()  # no flat line: the summaries' order is kept, not the rows'
    oriented = fit_average(both_fall, human, [("a", summary), ("b", summary)], (1.0, 5.0), "turned")
    assert oriented.signs == (-1.0, -1.0)  # the fit-best feature is still turned the way its rows go


def test_features_are_ranked_by_their_strength_in_either_direction() -> None:
    human = np.arange(8, dtype=float)
    by_judge: ByJudge = {"j": {"falls": -human, "noise": np.asarray([3.0, 1, 4, 1, 5, 9, 2, 6]), "rises": human}}
    ranked = ranked_terms(by_judge, human)
    assert [term for term, _ in ranked] == [("j", "falls"), ("j", "rises"), ("j", "noise")]
    assert [value for _, value in ranked[:2]] == [-1.0, 1.0]


def test_with_few_labels_the_chosen_combination_keeps_the_feature_that_tells() -> None:
    """The failure the issue measured: with 100 labels the ridge panel over 39 features per judge lost most
    of one judge's PMI. The combination chosen inside the fitting part must not fall below the best single
    feature it could have picked, and must beat the ridge panel, held out, over several seeded tables."""
    chosen: list[float] = []
    best: list[float] = []
    ridge: list[float] = []
    for seed in range(4):
        features, human = judged_items(100, seed)
        held_features, held_human = judged_items(1000, 100 + seed)
        combination = fit_feature_calibration(features, human, (1.0, 5.0), summary="followup", seed=seed)
        assert set(combination.cross_validated) == {"panel mean", "top 1", "ridge", "mean + ridge"}
        term = ranked_terms(features, human)[0][0]
        single = fit_average(features, human, [term], (1.0, 5.0), "top 1")
        panel = fit_ridge_panel(features, human, (1.0, 5.0), seed=seed)
        chosen.append(_spearman(combination.model.predict(held_features), held_human))
        best.append(_spearman(single.predict(held_features), held_human))
        ridge.append(_spearman(panel.predict(held_features), held_human))
    assert np.mean(chosen) >= np.mean(best) - 0.01
    assert np.mean(chosen) > np.mean(ridge) + 0.05


def spread_items(size: int, seed: int) -> tuple[ByJudge, np.ndarray]:
    """Features the way FED has them: every follow-up carries a little of the quality, so each judge's
    summary (the mean of its follow-ups) carries most, and no single follow-up stands out."""
    rng = np.random.default_rng(seed)
    quality = rng.normal(size=size)
    human = np.clip(np.round(3.0 + 0.9 * quality + rng.normal(scale=0.6, size=size)), 1.0, 5.0)
    by_judge: ByJudge = {}
    for judge in JUDGES:
        follow_ups = {name: 0.25 * quality + rng.normal(size=size) for name in FOLLOW_UPS}
        by_judge[judge] = follow_ups | {"followup": np.mean(list(follow_ups.values()), axis=0)}
    return by_judge, human


def test_with_few_labels_the_chosen_combination_keeps_the_plain_mean_where_every_feature_tells() -> None:
    """The other half of the issue's target: where the signal is spread over the follow-ups (FED), the
    choice must not fall below the panel mean, which needs no labels, held out."""
    chosen: list[float] = []
    mean: list[float] = []
    for seed in range(4):
        features, human = spread_items(50, seed)
        held_features, held_human = spread_items(1000, 100 + seed)
        combination = fit_feature_calibration(features, human, (1.0, 5.0), summary="followup", seed=seed)
        summaries = [(judge, "followup") for judge in JUDGES]
        plain = fit_average(features, human, summaries, (1.0, 5.0), "panel mean", orient=False)
        chosen.append(_spearman(combination.model.predict(held_features), held_human))
        mean.append(_spearman(plain.predict(held_features), held_human))
    assert np.mean(chosen) >= np.mean(mean) - 0.01


def _spearman(predicted: np.ndarray, human: np.ndarray) -> float:
    value = spearman(predicted, human)
    assert value is not None
    return value


def _table(by_judge: ByJudge, human: np.ndarray) -> ItemTable:
    ids = tuple(f"item-{i:03d}" for i in range(len(human)))
    return ItemTable(
        item_ids=ids,
        judges={judge: columns["followup"] for judge, columns in by_judge.items()},
        human=human,
        annotators={"a": human, "b": human},
        length=np.ones(len(human)),
        features=by_judge,
    )


def test_the_learning_curve_refits_each_size_on_its_own_split() -> None:
    features, human = judged_items(60, 7)
    table = _table(features, human)
    curve = learning_curve(table, summary="followup", seed=2, heldout_fraction=0.5, sizes=(10, 20), splits=2)
    assert [(p["label"], p["fit_items"]) for p in curve["points"]] == [("10", 10), ("20", 20), ("all", 30)]
    assert all(sum(p["chosen"].values()) == 2 for p in curve["points"])
    # The 'all' point of each split is the calibration fitted on that split's whole fitting part.
    direct: list[float] = []
    for split in range(2):
        fit_ids, held_ids = split_items(list(table.item_ids), 2 + split, 0.5)
        fit, held = table.subset(fit_ids), table.subset(held_ids)
        combination = fit_feature_calibration(
            fit.features, fit.human, fit.annotator_range(), summary="followup", seed=2 + split
        )
        direct.append(_spearman(combination.model.predict(held.features), held.human))
    assert curve["points"][-1]["rows"]["panel_calibrated"]["mean"] == pytest.approx(np.mean(direct), abs=1e-12)
    cells = curve_cells(curve)
    assert [row[0] for row in cells] == ["10", "20", "30 (all)"] and all(len(row) == 6 for row in cells)
    # The page draws it: one line per row, at the fitted sizes.
    calibration = {"calibration_id": "cal-x", "label_set": "s", "criterion": "c", "model": {}}
    figures = calibration_figures(calibration | {"metrics": {"curve": curve}})
    lines = figures[-1]["data"]
    assert [line["name"] for line in lines] == ["panel calibrated", "fit-best feature", "panel mean", "ridge alone"]
    assert all(line["x"] == [10, 20, 30] for line in lines)


def test_the_reported_plain_mean_is_the_combiners_panel_mean_which_no_label_turns_or_ties() -> None:
    """The report's and the curve's `panel mean` row is the label-free mean the combiner weighs: each
    summary in its own direction, on a line. An isotonic step fitted on the labels (the row before)
    tied items and turned a judge the way fifty rows showed, moving its Spearman by chance."""
    features, human = spread_items(80, 5)
    features["smollm2-135m"]["followup"] = -features["smollm2-135m"]["followup"]  # a judge that falls
    table = _table(features, human)
    fit, held = table.take(np.arange(40)), table.take(np.arange(40, 80))
    reported = panel_mean_predictor(fit)(held)
    candidate = candidates(fit.features, fit.annotator_range(), summary="followup", seed=0)[PANEL_MEAN]
    assert reported.tolist() == candidate(fit.features, fit.human).predict(held.features).tolist()
    assert len(np.unique(reported)) == len(held)  # no ties
    standardised = [(held.judges[j] - np.mean(fit.judges[j])) / np.std(fit.judges[j]) for j in JUDGES]
    assert _spearman(reported, held.human) == pytest.approx(_spearman(np.mean(standardised, axis=0), held.human))


def test_a_blend_standardises_each_part_on_its_rows_and_averages_what_a_row_has() -> None:
    """The blend of the panel mean and the ridge: each part's prediction standardised by its spread on the
    fitting rows (so neither part's scale outweighs the other), averaged, mapped on a rising line; it is
    saved and read back whole, and a row whose ridge features are missing keeps the mean's part."""
    features, human = spread_items(120, 3)
    summaries = [(judge, "followup") for judge in JUDGES]
    mean = fit_average(features, human, summaries, (1.0, 5.0), PANEL_MEAN, orient=False)
    ridge = fit_ridge_panel(features, human, (1.0, 5.0), seed=0)
    blend = fit_blend([mean, ridge], features, human, (1.0, 5.0), BLEND)
    parts = [part.predict(features) for part in (mean, ridge)]
    assert blend.center == pytest.approx([np.mean(p) for p in parts]) and blend.slope > 0
    expected = np.mean([(p - np.mean(p)) / np.std(p) for p in parts], axis=0)
    assert blend.score(features) == pytest.approx(expected)
    again = calibration_from_json(blend.to_json())
    assert isinstance(again, Blend) and again.predict(features).tolist() == blend.predict(features).tolist()
    needed = blend.features_by_judge()
    assert set(needed[JUDGES[0]]) == {"followup"} | set(ridge.features_by_judge()[JUDGES[0]])
    summaries_only = {
        judge: {
            name: values if name == "followup" else np.full(len(values), np.nan) for name, values in columns.items()
        }
        for judge, columns in features.items()
    }
    assert blend.score(summaries_only) == pytest.approx((parts[0] - np.mean(parts[0])) / np.std(parts[0]))


def test_a_ridge_short_of_rows_leaves_the_blend_to_the_mean() -> None:
    """Below the ridge's row floor (its features + 2) the ridge fits no judge; the blend is then the mean
    alone, in the mean's order, not a NaN: inside the folds of a 50-label fit this is what is scored."""
    features, human = spread_items(20, 4)
    summaries = [(judge, "followup") for judge in JUDGES]
    mean = fit_average(features, human, summaries, (1.0, 5.0), PANEL_MEAN, orient=False)
    ridge = fit_ridge_panel(features, human, (1.0, 5.0), seed=0)
    assert not ridge.judges
    blend = fit_blend([mean, ridge], features, human, (1.0, 5.0), BLEND)
    assert blend.parts == (mean,)
    assert rank(blend.predict(features)).tolist() == rank(mean.predict(features)).tolist()


def test_the_blend_refits_no_ridge_the_ridge_candidate_already_fitted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ridge is the costly fit, and the blend needs it on the very rows the ridge candidate was fitted
    on: once per fold and repeat, and once more on the whole fitting part when a ridge-using candidate
    is chosen, never twice."""
    calls: list[int] = []

    def counted(by_judge: ByJudge, human: np.ndarray, *args: object, **kwargs: object) -> FeatureCalibration:
        calls.append(len(human))
        return fit_ridge_panel(by_judge, human, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(combiner, "fit_ridge_panel", counted)
    features, human = spread_items(60, 2)
    combination = fit_feature_calibration(features, human, (1.0, 5.0), summary="followup", seed=1)
    assert combination.chosen in {BLEND, "ridge", "top 1"}
    whole = 1 if combination.chosen != "top 1" else 0
    assert len(calls) == REPEATS * FOLDS + whole


def test_a_pairwise_calibration_is_antisymmetric_so_equal_responses_tie_whatever_the_label_prior() -> None:
    """PandaLM's majority favours the second response a little, and a run's pairs come in a fixed order:
    the pair regression has no intercept, so swapping the responses negates the preference and two equal
    responses tie; the order-free lean to slot A is left out; the feature set is chosen on the fit."""
    from appliance.calibration.features import fit_pair_feature_calibration

    rng = np.random.default_rng(3)
    size = 240
    preference = rng.normal(size=size)
    tokens = rng.normal(size=size)
    lean = rng.normal(size=size)
    signal = preference + 0.3 * rng.normal(size=size) - 0.4  # labels lean to the second response
    human = np.where(signal > 0.3, 1.0, np.where(signal < -0.3, -1.0, 0.0))
    columns = {
        "j": {"preference": preference, "tokens": tokens, "position_lean": lean, "logprob": rng.normal(size=size)}
    }
    calibration = fit_pair_feature_calibration(columns, human, seed=0)
    assert "position_lean" not in calibration.features_by_judge()["j"]
    assert set(calibration.fit_agreement) == {"every feature", "direct preference and length", "length"}
    assert calibration.fit_agreement["length"] < calibration.fit_agreement[calibration.feature_set]

    def predicted(scale: float) -> float:
        one = {name: np.asarray([scale * 0.8]) for name in ("preference", "tokens", "logprob")}
        return float(calibration.features.predict({"j": one | {"position_lean": np.asarray([5.0])}})[0])

    assert predicted(0.0) == 0.0
    assert predicted(1.0) > 0 and predicted(-1.0) == pytest.approx(-predicted(1.0))
    equal = {name: np.asarray([0.0]) for name in ("preference", "tokens", "logprob", "position_lean")}
    assert calibration.predict({"j": equal})[0] == 0.0
