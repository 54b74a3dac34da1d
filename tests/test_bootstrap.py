import numpy as np

from appliance.scenarios.pingpong.report import length_factor
from appliance.util.stats import bootstrap_interval


def test_interval_brackets_the_mean_and_is_reproducible() -> None:
    values = [1.0, 2.0, 2.5, 3.0, 4.5, 5.0, 3.5, 2.0]
    first = bootstrap_interval(values, seed=7)
    assert first is not None
    assert first[0] < float(np.mean(values)) < first[1]
    assert first == bootstrap_interval(values, seed=7)


def test_interval_of_constant_data_is_a_point_and_of_nothing_is_none() -> None:
    assert bootstrap_interval([3.0, 3.0, 3.0]) == (3.0, 3.0)
    assert bootstrap_interval([]) is None


def test_length_penalty_only_for_longer_than_the_median_and_at_most_seven_percent() -> None:
    assert length_factor(100.0, 200.0) == 1.0
    assert length_factor(400.0, 100.0) == 1 + 0.07 * (100 / 400 - 1)  # 0.9475, where sqrt would give 0.5
    assert length_factor(None, 100.0) == 1.0
