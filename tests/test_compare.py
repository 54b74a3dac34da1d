"""`appliance compare` as a regression gate: paired bootstrap arithmetic, and the real CLI on scripted runs.

The runs are played by a scripted model into a real DuckDB file; the gate is the real CLI in a
subprocess: exit 1 naming the metric that dropped, 0 on identical runs, 2 on runs judged by
other judges or on bad input.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.compare.gate import IMPROVEMENT, INSUFFICIENT, NO_CHANGE, REGRESSION, MetricComparison, decide
from appliance.compare.paired import paired_difference
from appliance.headline import Unit, mean_of
from appliance.util.stats import holm_adjusted
from tests.fakes import scripted_pingpong_run
from tests.test_cli import REPO, assert_clean_error, cli


def _units(values: list[float]) -> list[Unit]:
    return [Unit(key=str(i), player="m", values={"x": v}) for i, v in enumerate(values)]


def test_paired_difference_on_hand_computed_data() -> None:
    base = _units([1.0, 2.0, 3.0, 4.0])
    shifted = paired_difference(base, _units([2.0, 3.0, 4.0, 5.0]), mean_of("x"), seed=1)
    # every pair moves by exactly one: every resample's difference is 1
    assert (shifted.base, shifted.candidate, shifted.delta, shifted.ci) == (2.5, 3.5, 1.0, (1.0, 1.0))
    # Swapping a unit's two results flips its +1 into -1: the swapped difference is +1 only when no
    # unit is swapped, 1 time in 16, the smallest p-value four units can give against "it did not rise".
    assert shifted.pairs == 4 and shifted.p_above(0.0) == pytest.approx(1 / 16, abs=0.015)
    assert shifted.p_below(0.0) == 1.0  # nothing speaks for a fall
    # against "it rose by at least 1.5": a shortfall of 0.5 or more comes with 2+ of 4 units swapped
    # the other way, 5 times in 16
    assert shifted.p_below(1.5) == pytest.approx(5 / 16, abs=0.03)
    same = paired_difference(base, _units([1.0, 2.0, 3.0, 4.0]), mean_of("x"))
    assert (same.delta, same.ci, same.p_below(0.0), same.p_above(0.0)) == (0.0, (0.0, 0.0), 1.0, 1.0)
    noisy = paired_difference(base, _units([1.5, 1.5, 3.5, 3.5]), mean_of("x"), seed=1)
    assert noisy.delta == 0.0 and noisy.ci is not None and noisy.ci[0] < 0.0 < noisy.ci[1]
    # the unit differences are +0.5, -0.5, +0.5, -0.5: a swap pattern gives 0 in 6 of 16 equally likely
    # cases and lies on either side otherwise, so each one-sided p is near 11/16
    for p in (noisy.p_below(0.0), noisy.p_above(0.0)):
        assert p is not None and abs(p - 11 / 16) < 0.03


def test_holm_adjustment_on_hand_computed_p_values() -> None:
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, then 0.04 x 1 stays at the running 0.06
    assert holm_adjusted([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm_adjusted([None, 0.2, 0.9]) == [None, 0.4, 0.9]


def _row(
    name: str, p_regression: float, p_improvement: float, ci: tuple[float, float], drop: float
) -> MetricComparison:
    return MetricComparison(
        family="f",
        metric=name,
        base_player="m",
        candidate_player="m",
        higher_is_better=True,
        base=0.0,
        candidate=0.0,
        delta=0.0,
        ci=ci,
        p_regression=p_regression,
        p_improvement=p_improvement,
        pairs=10,
        max_drop=drop,
    )


def test_each_verdict_follows_holm_across_the_comparison() -> None:
    rows = [
        _row("fell", 0.001, 0.999, (-2.0, -1.0), 0.0),
        _row("rose", 0.999, 0.002, (1.0, 2.0), 0.0),
        _row("held", 0.5, 0.5, (-0.1, 0.2), 0.2),
        # p = 0.02 alone would be a regression at 0.05; second smallest of four, Holm makes it 0.06
        _row("unclear", 0.02, 0.98, (-0.5, 0.1), 0.0),
    ]
    decide(rows, 0.05)
    assert [row.verdict for row in rows] == [REGRESSION, IMPROVEMENT, NO_CHANGE, INSUFFICIENT]
    assert rows[3].p_regression_holm == pytest.approx(0.06) and rows[0].p_regression_holm == pytest.approx(0.004)
    assert [row.regression for row in rows] == [True, False, False, False]
    decide(rows, 0.10)  # a looser family-wise rate lets the unclear drop through
    assert rows[3].verdict == REGRESSION


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    db = tmp_path_factory.mktemp("gate") / "gate.duckdb"
    made = {
        "base": scripted_pingpong_run(db, "A good answer.", ["smollm2-135m"]),
        "same": scripted_pingpong_run(db, "A good answer.", ["smollm2-135m"]),
        "worse": scripted_pingpong_run(db, "A bad answer.", ["smollm2-135m"]),
        "other_judges": scripted_pingpong_run(db, "A good answer.", ["gemma3-270m"]),
    }
    return db, made


def test_a_known_drop_fails_the_gate_with_the_metric_named(runs: tuple[Path, dict[str, str]]) -> None:
    db, made = runs
    result = cli("compare", made["base"], made["worse"], "--db", str(db), "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    final = next(m for m in report["metrics"] if m["metric"] == "final")
    assert (final["base"], final["candidate"], final["delta"]) == (4.0, 2.0, -2.0)  # the judges' 4 against 2
    assert final["ci"] == [-2.0, -2.0] and final["pairs"] == 8 and final["regression"]
    assert {m["metric"] for m in report["metrics"] if m["regression"]} == {"final", "ln_score"}
    table = cli("compare", made["base"], made["worse"], "--db", str(db))
    assert table.returncode == 1 and "pingpong.final" in table.stdout and "REGRESSION" in table.stdout
    # an allowed drop larger than the fall passes the gate
    allowed = db.parent / "regression.toml"
    allowed.write_text('default_max_drop = 0.0\n[max_drop]\n"pingpong.final" = 2.5\n"pingpong.ln_score" = 2.5\n')
    assert cli("compare", made["base"], made["worse"], "--thresholds", str(allowed), "--db", str(db)).returncode == 0
    markdown = cli("compare", made["base"], made["worse"], "--markdown", "--db", str(db))
    assert markdown.returncode == 1 and "| pingpong.final |" in markdown.stdout and "**REGRESSION**" in markdown.stdout


def test_identical_runs_pass(runs: tuple[Path, dict[str, str]]) -> None:
    db, made = runs
    result = cli("compare", made["base"], made["same"], "--db", str(db), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["regressions"] == 0 and all(m["delta"] == 0.0 for m in report["metrics"])


def test_runs_judged_by_other_judges_are_refused_unless_forced(runs: tuple[Path, dict[str, str]]) -> None:
    db, made = runs
    refused = cli("compare", made["base"], made["other_judges"], "--db", str(db))
    assert_clean_error(refused, "judges smollm2-135m against gemma3-270m", "--force")
    forced = cli("compare", made["base"], made["other_judges"], "--force", "--db", str(db))
    assert forced.returncode == 0 and "although the runs differ" in forced.stdout


def test_bad_input_exits_2(runs: tuple[Path, dict[str, str]]) -> None:
    db, made = runs
    assert_clean_error(cli("compare", made["base"], "no-such-run", "--db", str(db)), "no-such-run")
    assert_clean_error(cli("compare", made["base"], made["same"], "--max-drop", "x=y", "--db", str(db)), "x=y")
    unknown = cli("compare", made["base"], made["same"], "--max-drop", "pingpong.nope=1", "--db", str(db))
    assert_clean_error(unknown, "pingpong.nope")


def test_the_error_rate_program_catches_a_large_injected_drop(tmp_path: Path) -> None:
    """`tests/gate_error_rates.py` (the figures of docs/regression.md) on a few pairs: a drop of about
    half a point in every judge score fails the gate in each pair; its table has a row per group."""
    out = tmp_path / "rates.md"
    result = subprocess.run(
        [sys.executable, "-m", "tests.gate_error_rates", "--pairs", "2", "--power-pairs", "2", "--drops", "0.6",
         "--work", str(tmp_path / "work"), "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line for line in out.read_text().splitlines() if line.startswith(("| A/A", "| injected"))]
    assert len(rows) == 2
    cells = [cell.strip() for cell in rows[1].split("|")]
    assert cells[2:4] == ["0.6", "2"] and cells[5].startswith("1.000")  # both pairs fail at alpha 0.05
    assert not list((tmp_path / "work").iterdir())  # each pair's store is removed after
