"""`appliance compare` as a regression gate: paired bootstrap arithmetic, and the real CLI on scripted runs.

The runs are played by a scripted model into a real DuckDB file; the gate is the real CLI in a
subprocess: exit 1 naming the metric that dropped, 0 on identical runs, 2 on runs judged by
other judges or on bad input.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.compare.paired import paired_difference
from appliance.headline import Unit, mean_of
from tests.fakes import scripted_pingpong_run
from tests.test_cli import assert_clean_error, cli


def _units(values: list[float]) -> list[Unit]:
    return [Unit(key=str(i), player="m", values={"x": v}) for i, v in enumerate(values)]


def test_paired_difference_on_hand_computed_data() -> None:
    base = _units([1.0, 2.0, 3.0, 4.0])
    shifted = paired_difference(base, _units([2.0, 3.0, 4.0, 5.0]), mean_of("x"), seed=1)
    # every pair moves by exactly one: every resample's difference is 1
    assert (shifted.base, shifted.candidate, shifted.delta, shifted.ci) == (2.5, 3.5, 1.0, (1.0, 1.0))
    assert shifted.p_value == 0.0 and shifted.pairs == 4
    same = paired_difference(base, _units([1.0, 2.0, 3.0, 4.0]), mean_of("x"))
    assert (same.delta, same.ci, same.p_value) == (0.0, (0.0, 0.0), 1.0)
    noisy = paired_difference(base, _units([1.5, 1.5, 3.5, 3.5]), mean_of("x"), seed=1)
    assert noisy.delta == 0.0 and noisy.ci is not None and noisy.ci[0] < 0.0 < noisy.ci[1]
    assert noisy.p_value is not None and noisy.p_value > 0.5


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
