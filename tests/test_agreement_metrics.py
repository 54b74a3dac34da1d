"""Agreement metrics against scipy and published reference values, on fixed data."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import isotonic_regression

from appliance.calibration.isotonic import fit_isotonic
from appliance.util.agreement import (
    agreement,
    bootstrap_metrics,
    cohen_kappa,
    kendall_tau_b,
    krippendorff_alpha_interval,
    mae,
    pearson,
    rank,
    spearman,
)

RNG = np.random.default_rng(7)
# judge-like data: a coarse integer scale with many ties, against a noisy human mean
HUMAN = np.round(RNG.uniform(0, 4, size=60) * 5) / 5
JUDGE = np.clip(np.round(HUMAN * 2 + RNG.normal(0, 2.5, size=60)), 1, 10)


def test_pearson_spearman_kendall_match_scipy_with_ties() -> None:
    assert pearson(JUDGE, HUMAN) == pytest.approx(stats.pearsonr(JUDGE, HUMAN).statistic, abs=1e-12)
    assert spearman(JUDGE, HUMAN) == pytest.approx(stats.spearmanr(JUDGE, HUMAN).statistic, abs=1e-12)
    assert kendall_tau_b(JUDGE, HUMAN) == pytest.approx(stats.kendalltau(JUDGE, HUMAN).statistic, abs=1e-12)
    assert rank(JUDGE) == pytest.approx(stats.rankdata(JUDGE))


def test_undefined_correlations_are_none_not_zero() -> None:
    constant = np.full(10, 10.0)
    assert pearson(constant, HUMAN[:10]) is None
    assert spearman(constant, HUMAN[:10]) is None
    assert kendall_tau_b(constant, HUMAN[:10]) is None
    assert pearson([1.0], [2.0]) is None


def test_krippendorff_alpha_interval_matches_the_published_example() -> None:
    # Krippendorff's worked example (4 coders, 12 units, missing values); alpha interval = 0.849.
    coders = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
        [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
    ]
    units = [list(unit) for unit in zip(*coders, strict=True)]
    assert krippendorff_alpha_interval(units) == pytest.approx(0.849, abs=5e-4)


def test_krippendorff_alpha_is_one_for_perfect_agreement() -> None:
    assert krippendorff_alpha_interval([[1, 1], [2, 2], [4, 4]]) == pytest.approx(1.0)


def test_cohen_kappa_textbook_example() -> None:
    # 50 items: both yes 20, yes/no 5, no/yes 10, both no 15 -> p_o 0.7, p_e 0.5, kappa 0.4
    a = [1] * 20 + [1] * 5 + [0] * 10 + [0] * 15
    b = [1] * 20 + [0] * 5 + [1] * 10 + [0] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)
    assert agreement(a, b) == pytest.approx(0.7)


def test_mae() -> None:
    assert mae([1, 2, 3], [2, 2, 5]) == pytest.approx(1.0)


def test_isotonic_fit_matches_scipy_on_distinct_points() -> None:
    x = np.arange(30, dtype=float)
    y = RNG.normal(size=30).cumsum()
    mapping = fit_isotonic(x, y)
    expected = isotonic_regression(y).x
    assert [mapping(v) for v in x] == pytest.approx(expected)


def test_isotonic_fit_pools_tied_scores_and_stays_monotone() -> None:
    mapping = fit_isotonic(JUDGE, HUMAN)
    assert list(mapping.ys) == sorted(mapping.ys)
    # the map at each judge level equals scipy's weighted fit of the per-level means
    levels, inverse = np.unique(JUDGE, return_inverse=True)
    weights = np.bincount(inverse).astype(float)
    means = np.bincount(inverse, weights=HUMAN) / weights
    assert [mapping(v) for v in levels] == pytest.approx(isotonic_regression(means, weights=weights).x)


def test_bootstrap_intervals_are_seeded_and_bracket_the_estimate() -> None:
    def compute(rows: np.ndarray) -> dict[str, float | None]:
        return {"spearman": spearman(JUDGE[rows], HUMAN[rows]), "mae": mae(JUDGE[rows] / 2.5, HUMAN[rows])}

    first = bootstrap_metrics(compute, len(JUDGE), seed=1)
    assert first == bootstrap_metrics(compute, len(JUDGE), seed=1)
    for name, value in compute(np.arange(len(JUDGE))).items():
        interval = first[name]
        assert interval is not None and value is not None
        assert interval[0] <= value <= interval[1]
