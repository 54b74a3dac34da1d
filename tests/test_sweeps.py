"""Checkpoint sweeps as sweeps: `report`, `compare --sweep` and the page on a scripted sweep whose curve is
known by construction (rising to step 10, then falling below the base at step 40), and the steps the
catalog gives checkpoint folders.

The real SmolLM2 taboo sweep is played by test_adapters.py, which checks `report` and `compare --sweep` on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from appliance.catalog.models import checkpoint_steps
from appliance.compare.gate import IMPROVEMENT, REGRESSION, Thresholds
from appliance.compare.sweep import compare_sweep
from appliance.store import Store
from appliance.util.stats import holm_adjusted
from appliance.util.terminal import interval, number
from tests.scripted_sweep import BASE, SWEEP, scripted_sweep_run
from tests.test_cli import assert_clean_error, cli
from tests.test_view import _open, _rendered_plots, embedded_data
from tests.test_view import browser as browser  # a fixture

#: rising then falling: step 10 is the best, step 40 (the last) worse than the base
LIFTS = {5: 0.4, 10: 1.0, 20: 0.5, 40: -0.6}
CHECKPOINTS = [f"{SWEEP}@checkpoint-{step}" for step in LIFTS]


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("sweep")
    db = folder / "store.duckdb"
    return db, scripted_sweep_run(folder, db, LIFTS, conversations=12)


def test_checkpoint_steps_come_from_the_folder_names_or_their_order() -> None:
    assert checkpoint_steps(["checkpoint-200", "checkpoint-1000"]) == [200, 1000]
    assert checkpoint_steps(["epoch2-step-300", "epoch3-step-450"]) == [300, 450]
    assert checkpoint_steps(["first", "checkpoint-7"]) == [1, 2]  # one without a number: positions
    assert checkpoint_steps(["a-5", "b-5"]) == [1, 2]  # two with the same number: positions


def test_the_sweep_is_known_from_the_store_and_the_multiplicity_covers_every_checkpoint(
    sweep_run: tuple[Path, str],
) -> None:
    db, run_id = sweep_run
    with Store.open(db, read_only=True) as store:
        models = {model.name: model.parameters for model in store.run_models(run_id)}
        result = compare_sweep(store, run_id, run_id, None, Thresholds())
    assert {name: (models[name]["sweep"], models[name]["step"]) for name in CHECKPOINTS} == {
        name: (SWEEP, step) for name, step in zip(CHECKPOINTS, LIFTS, strict=True)
    }
    assert result.sweep.base == BASE and result.sweep.players == CHECKPOINTS and result.gated == CHECKPOINTS[-1]
    final = next(curve for curve in result.curves if curve.metric == "final")
    assert [point.step for point in final.points] == list(LIFTS)
    values = [point.estimate.value or 0.0 for point in final.points]
    assert values[0] < values[1] > values[2] > values[3] and values[3] < (final.base.value or 0.0)
    assert final.best is not None and final.best.player == f"{SWEEP}@checkpoint-10"
    verdicts = {point.step: point.against_base.verdict for point in final.points}
    assert verdicts[10] == IMPROVEMENT and verdicts[40] == REGRESSION
    assert [m.metric for m in result.gate_regressions] == ["final", "ln_score"]
    assert f"{SWEEP}@checkpoint-10" in result.better
    # Holm over all 4 checkpoints x 3 metrics at once, not over one checkpoint's 3
    metrics = result.comparison.metrics
    assert len(metrics) == 12
    assert [m.p_improvement_holm for m in metrics] == holm_adjusted([m.p_improvement for m in metrics])


def test_report_shows_the_sweep_in_step_order_with_the_best_checkpoint_named(sweep_run: tuple[Path, str]) -> None:
    db, run_id = sweep_run
    shown = cli("report", run_id, "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    table = shown.stdout[shown.stdout.index(f"sweep {SWEEP}: pingpong.final") :]
    rows = [line for line in table.splitlines()[:12] if "@checkpoint-" in line or "(base)" in line]
    assert [row.split()[1] for row in rows] == [f"{BASE}", *CHECKPOINTS]
    assert f"{SWEEP}@checkpoint-10 (best)" in rows[2]
    assert "REGRESSION" in rows[4] and "improvement" in rows[2]
    assert f"Gate on {CHECKPOINTS[-1]}: REGRESSION in pingpong.final, pingpong.ln_score." in shown.stdout


def _printed_rows(text: str, title: str) -> list[list[str]]:
    """The cells of the text table under `title`, row by row."""
    lines = text[text.index(title) :].splitlines()[1:]
    rows = []
    for line in lines[3:]:  # below the top border, the header and the header's rule
        if not line.startswith("│"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("│").split("│")])
    return rows


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def test_report_json_holds_every_sweep_figure_the_text_prints(sweep_run: tuple[Path, str]) -> None:
    """Each table row, the best checkpoint, the checkpoints better than the base and the gate's verdict,
    read from `report --json` and printed with the text's number formats, are what `report` printed."""
    db, run_id = sweep_run
    text = cli("report", run_id, "--db", str(db))
    as_json = cli("report", run_id, "--db", str(db), "--json")
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    (pingpong,) = json.loads(as_json.stdout)  # still a list of scenario reports, the sweep inside its own
    assert pingpong["scenario"] == "pingpong" and pingpong["rows"] and pingpong["sweep_notes"] == []
    (sweep,) = pingpong["sweeps"]
    assert sweep["sweep"]["name"] == SWEEP and sweep["sweep"]["base"] == BASE and sweep["gated"] == CHECKPOINTS[-1]
    assert [curve["metric"] for curve in sweep["curves"]] == ["final", "ln_score", "refusal_ratio"]
    for curve in sweep["curves"]:
        direction = "higher is better" if curve["higher_is_better"] else "lower is better"
        base = curve["base"]
        expected = [[f"{base['label']} (base)", "-", number(base["value"]), interval(base["ci"]), str(base["n"])]
                     + [""] * 4]  # fmt: skip
        for point in curve["points"]:
            against = point["against_base"]
            improved = against["verdict"] == IMPROVEMENT
            expected.append(
                [
                    point["player"] + (" (best)" if point["player"] == curve["best_checkpoint"] else ""),
                    str(point["step"]),
                    number(point["estimate"]["value"]),
                    interval(point["estimate"]["ci"]),
                    str(point["estimate"]["n"]),
                    number(against["delta"]),
                    interval(against["ci"]),
                    _p(against["p_improvement_holm"] if improved else against["p_regression_holm"]),
                    "REGRESSION" if against["regression"] else against["verdict"],
                ]
            )
        title = f"sweep {SWEEP}: {curve['family']}.{curve['metric']} ({direction})"
        assert _printed_rows(text.stdout, title) == expected, curve["metric"]
        if curve["best_checkpoint"] is not None:
            best = next(point for point in curve["points"] if point["player"] == curve["best_checkpoint"])
            line = f"Best on {curve['family']}.{curve['metric']}: {best['player']} (step {best['step']}), "
            assert line + f"{number(best['estimate']['value'])}." in text.stdout
    assert sweep["holm_tests"] == len(sweep["comparison"]["metrics"]) == len(CHECKPOINTS) * len(sweep["curves"])
    holm = f"Holm across {len(sweep['sweep']['checkpoints'])} checkpoints and {len(sweep['curves'])} metrics"
    better = "; ".join(f"{player} ({', '.join(metrics)})" for player, metrics in sweep["better"].items())
    assert f"({holm}): {better}." in " ".join(text.stdout.split()), "the better checkpoints"
    regressed = [
        f"{m['family']}.{m['metric']}"
        for m in sweep["comparison"]["metrics"]
        if m["candidate_player"] == sweep["gated"] and m["regression"]
    ]
    assert sweep["regressions"] == len(regressed) > 0
    assert f"Gate on {sweep['gated']}: REGRESSION in {', '.join(regressed)}." in text.stdout
    # one family played, so its part is the whole sweep: what `compare --sweep --json` prints
    assert sweep == json.loads(cli("compare", run_id, "--sweep", SWEEP, "--db", str(db), "--json").stdout)


def test_compare_sweep_exits_1_when_the_gated_checkpoint_regressed_and_names_the_better_ones(
    sweep_run: tuple[Path, str],
) -> None:
    db, run_id = sweep_run
    gated_last = cli("compare", run_id, "--sweep", SWEEP, "--db", str(db), "--json")
    assert gated_last.returncode == 1, gated_last.stderr
    verdict = json.loads(gated_last.stdout)
    assert verdict["gated"] == CHECKPOINTS[-1] and verdict["regressions"] == 2
    assert set(verdict["better"]) >= {f"{SWEEP}@checkpoint-10"} and CHECKPOINTS[-1] not in verdict["better"]
    assert len(verdict["comparison"]["metrics"]) == 12
    gated_best = cli("compare", run_id, run_id, "--sweep", SWEEP, "--checkpoint", "10", "--db", str(db), "--markdown")
    assert gated_best.returncode == 0, gated_best.stderr
    assert (
        "Gate on ft@checkpoint-10: no regression." in gated_best.stdout
        and "| ft@checkpoint-40 | 40 |" in gated_best.stdout
    )
    assert_clean_error(
        cli("compare", run_id, "--sweep", SWEEP, "--checkpoint", "7", "--db", str(db)), "steps: 5, 10, 20, 40"
    )
    assert_clean_error(cli("compare", run_id, "--sweep", "nope", "--db", str(db)), "no sweep 'nope'", "its sweeps: ft")
    assert_clean_error(cli("compare", run_id, "--db", str(db)), "CANDIDATE", "--sweep")


def test_a_sweep_without_its_base_is_refused_by_compare_and_noted_by_report(tmp_path: Path) -> None:
    db = tmp_path / "store.duckdb"
    run_id = scripted_sweep_run(tmp_path, db, {1: 0.0, 2: 0.0}, conversations=2, with_base=False)
    assert_clean_error(
        cli("compare", run_id, "--sweep", SWEEP, "--db", str(db)), "did not play the sweep's base 'base'"
    )
    shown = cli("report", run_id, "--db", str(db))
    assert shown.returncode == 0 and f"Sweep {SWEEP}: its base {BASE} did not play in this run" in shown.stdout
    (pingpong,) = json.loads(cli("report", run_id, "--db", str(db), "--json").stdout)
    (note,) = pingpong["sweep_notes"]
    assert (
        pingpong["sweeps"] == []
        and note.startswith(f"Sweep {SWEEP}: its base {BASE} did not play")
        and note in " ".join(shown.stdout.split())
    )


def test_the_page_draws_the_curve_and_a_click_opens_that_checkpoints_transcripts(
    sweep_run: tuple[Path, str],
    browser: tuple[Any, Path],
    tmp_path: Path,
) -> None:
    db, run_id = sweep_run
    page = tmp_path / "sweep.html"
    assert cli("view", run_id, "--db", str(db), "--out", str(page)).returncode == 0
    (sweep,) = embedded_data(page.read_text())["sweeps"]
    assert [curve["metric"] for curve in sweep["curves"]] == [
        "pingpong.final",
        "pingpong.ln_score",
        "pingpong.refusal_ratio",
    ]
    line = sweep["curves"][0]["figure"]["data"][-1]
    assert line["x"] == [float(step) for step in LIFTS] and line["customdata"] == CHECKPOINTS
    driver, _ = browser
    _open(driver, page)
    drawn = "return document.querySelectorAll('#sweeps .js-plotly-plot g.trace').length"
    assert driver.execute_script(drawn) >= 3 * 5  # per curve: two bands of two edges, and the line
    assert _rendered_plots(driver) >= 3
    driver.execute_script("document.getElementById('sweeps').scrollIntoView()")
    driver.save_screenshot(str(tmp_path / "sweep.png"))
    points = driver.find_elements("css selector", "#sweeps .js-plotly-plot g.trace.scatter:last-of-type path.point")
    assert len(points) >= len(LIFTS)
    from selenium.webdriver.common.action_chains import ActionChains  # the browser fixture skips without selenium

    # a person's click at the point (Plotly's drag layer lies over the points and turns it into plotly_click)
    ActionChains(driver).move_to_element(points[1]).pause(0.3).click().perform()  # the first curve's second point
    chosen = driver.execute_script("return document.getElementById('filter-player').value")
    assert chosen == CHECKPOINTS[1]
    shown = [card for card in driver.find_elements("css selector", "details.transcript") if card.is_displayed()]
    assert shown and all(CHECKPOINTS[1] in card.find_element("css selector", "summary").text for card in shown)
