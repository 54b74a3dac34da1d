"""`appliance view`: the page's data from scripted runs, the real CLI, and the page in headless Chromium.

The browser test opens a page built from a real SmolLM2 run, checks that every plot and a
transcript render, rates five transcripts as a person would, exports them, and imports the file
back with `appliance labels import`. It saves a screenshot beside the page.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from appliance.paths import judges_dir
from appliance.store import Store
from appliance.view import collect_contents, render_page
from appliance.view.figures import calibration_figures
from tests.fakes import LineReader, scripted_pingpong_run, wait_until
from tests.test_calibration import calibrate, import_rows, rating_rows
from tests.test_cli import REPO, assert_clean_error, cli

HOSTILE = "</script><script>document.title='owned'</script> a good answer"


@pytest.fixture(scope="module")
def scripted_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    db = tmp_path_factory.mktemp("view") / "view.duckdb"
    # 8 conversations: the fewest with which a fall on every one can fail the gate (2^-8, times 3 metrics)
    base = scripted_pingpong_run(db, HOSTILE, ["smollm2-135m"], limit=8)
    worse = scripted_pingpong_run(db, "A bad answer.", ["smollm2-135m"], limit=8)
    return db, base, worse


def one_value(con: Any, sql: str, *parameters: Any) -> Any:
    row = con.execute(sql, list(parameters)).fetchone()
    assert row is not None, sql
    return row[0]


def embedded_data(html: str) -> dict[str, Any]:
    found = re.search(r'<script id="view-data" type="application/json">(.*?)</script>', html, flags=re.DOTALL)
    assert found is not None
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def test_two_runs_give_boards_per_instance_deltas_and_transcripts(scripted_runs: tuple[Path, str, str]) -> None:
    db, base, worse = scripted_runs
    with Store.open(db, read_only=True) as store:
        contents = collect_contents(store, [base, worse], judges_dir(), max_transcripts=6)
        html = render_page(contents, "t")
    assert [(b.run_id, b.scenario) for b in contents.boards] == [(base, "pingpong"), (worse, "pingpong")]
    final = {b.run_id: next(m for m in b.metrics if m.metric == "final") for b in contents.boards}
    assert [(r.label, r.value, r.ci, r.n) for r in final[base].rows] == [("smollm2-135m", 4.0, (4.0, 4.0), 8)]
    assert final[worse].rows[0].value == 2.0
    assert contents.comparison is not None
    deltas = next(d for d in contents.comparison.per_instance if d.metric == "final")
    assert len(deltas.deltas) == 8 and all(d.delta == -2.0 for d in deltas.deltas)  # every instance fell by 2
    assert contents.transcripts_total == 16 and len(contents.transcripts) == 6  # capped, in run order
    first = contents.transcripts[0]
    assert first.run_id == base and [c.name for c in first.criteria] == ["in_character", "entertaining", "fluent"]
    assert first.scores["final"] == 4.0 and any(m.text == HOSTILE for m in first.messages)
    verdicts = [v for m in first.messages for v in m.verdicts] + first.episode_verdicts
    assert verdicts and all(v.raw_text for v in verdicts)
    # stored text cannot close the data element: it comes back intact, and the page loads nothing
    assert any(m["text"] == HOSTILE for t in embedded_data(html)["transcripts"] for m in t["messages"])
    assert html.count("</script>") == 3
    own_markup = re.sub(r"<script>.*?</script>", "", html, flags=re.DOTALL)  # Plotly's bundle and ours, inline
    assert not re.search(r"\b(src|href)=", own_markup)  # no element loads anything


def test_calibration_plots_show_held_out_agreement_and_the_fitted_maps(tmp_path: Path) -> None:
    db = tmp_path / "cal.duckdb"
    run_id = scripted_pingpong_run(db, "A good answer.", ["smollm2-135m"], limit=2)
    with Store.open(db) as store:
        import_rows(store, tmp_path, rating_rows())
        record = calibrate(store)["record"]
        contents = collect_contents(store, [run_id], judges_dir(), max_transcripts=0)
    (calibration,) = contents.calibrations
    assert calibration["calibration_id"] == record.calibration_id and calibration["used_by"] == []
    held_out, maps = calibration_figures(calibration)
    (points,) = held_out["data"]
    expected = {judge: row["spearman"]["value"] for judge, row in record.metrics["judges"].items()}
    expected["panel_calibrated"] = record.metrics["panel_calibrated"]["spearman"]["value"]
    assert {x: y for x, y in zip(points["x"], points["y"], strict=True) if x in expected} == pytest.approx(expected)
    assert [trace["name"] for trace in maps["data"]] == list(record.model["maps"])
    assert maps["data"][0]["x"] == record.model["maps"][maps["data"][0]["name"]]["xs"]
    assert contents.transcripts == [] and contents.transcripts_total == 2


def test_view_cli_writes_the_page_and_refuses_bad_runs(scripted_runs: tuple[Path, str, str], tmp_path: Path) -> None:
    db, base, _ = scripted_runs
    out = tmp_path / "page.html"
    result = cli("view", base, "--db", str(db), "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["runs"] == [base] and out.stat().st_size > 1_000_000  # Plotly is inline
    assert_clean_error(cli("view", "no-such-run", "--db", str(db), "--out", str(out)), "no run 'no-such-run'")
    empty = tmp_path / "empty.duckdb"
    Store.open(empty).close()
    assert_clean_error(cli("view", "--db", str(empty), "--out", str(tmp_path / "x.html")), "no runs stored yet")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_serve_answers_on_loopback_only(scripted_runs: tuple[Path, str, str], tmp_path: Path) -> None:
    db, base, _ = scripted_runs
    page = tmp_path / "served.html"
    command = [
        sys.executable,
        "-m",
        "appliance",
        "view",
        base,
        "--db",
        str(db),
        "--out",
        str(page),
        "--serve",
        "--port",
        "0",
    ]
    # Ctrl-C as a terminal sends it: a suite started in the background (`make test &`) runs with SIGINT
    # ignored, which its children inherit, and Python then installs no KeyboardInterrupt handler
    with subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint
    ) as server:
        try:
            assert server.stdout is not None
            line = LineReader(server.stdout).wait_for("serving ", timeout_s=300)
            url = re.search(r"serving (http://127\.0\.0\.1:\d+/served\.html)", line)
            assert url is not None, line
            with urllib.request.urlopen(url.group(1), timeout=120) as response:
                assert response.status == 200 and response.read() == page.read_bytes()
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=120)
            except subprocess.TimeoutExpired:
                server.kill()  # never left behind for Popen's exit to wait on forever
                raise
        assert server.stderr is not None
        assert server.returncode == 130 and "Traceback" not in server.stderr.read()  # Ctrl-C stops it cleanly


# ---- the page in a real browser -------------------------------------------------------------


def _browser_or_skip(downloads: Path) -> Any:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed (make test installs them as root)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (it comes with the dev extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,1800")
    options.add_experimental_option(
        "prefs", {"download.default_directory": str(downloads), "download.prompt_for_download": False}
    )
    browser = webdriver.Chrome(options=options, service=Service(driver))
    browser.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    return browser


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    downloads = tmp_path_factory.mktemp("downloads")
    driver = _browser_or_skip(downloads)
    yield driver, downloads
    driver.quit()


def _open(driver: Any, page: Path) -> None:
    driver.get(page.as_uri())
    wait_until(
        lambda: driver.execute_script("return document.body.getAttribute('data-ready')") == "true",
        "the page finishing its drawing",
    )


def _rendered_plots(driver: Any) -> int:
    """Plots Plotly drew with at least one trace in them."""
    script = "return [...document.querySelectorAll('.js-plotly-plot')].filter(p => p.querySelector('g.trace')).length"
    return int(driver.execute_script(script))


def test_the_comparison_page_draws_its_deltas(
    scripted_runs: tuple[Path, str, str], browser: tuple[Any, Path], tmp_path: Path
) -> None:
    db, base, worse = scripted_runs
    page = tmp_path / "compare.html"
    assert cli("view", base, worse, "--db", str(db), "--out", str(page)).returncode == 0
    driver, _ = browser
    _open(driver, page)
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0  # nothing fetched
    figures = len(embedded_data(page.read_text())["comparison"]["figures"])
    assert figures == 3  # final, ln_score, refusal_ratio per instance
    assert _rendered_plots(driver) >= figures + 2 * 3  # and each run's three metric plots
    text = driver.find_element("id", "comparison").text
    assert "pingpong.final" in text and "REGRESSION" in text
    driver.execute_script("document.getElementById('comparison').scrollIntoView()")
    driver.save_screenshot(str(tmp_path / "comparison.png"))
    assert driver.title != "owned"  # the hostile reply stayed text


@pytest.mark.real_model
def test_real_run_page_renders_and_its_ratings_round_trip(browser: tuple[Any, Path], tmp_path: Path) -> None:
    db = tmp_path / "real.duckdb"
    played = cli(
        "run", "--scenario", "pingpong", "--players", "smollm2-135m", "--panel", "smollm2",
        "--limit", "3", "--turns", "1", "--db", str(db), "--json",
    )  # fmt: skip
    assert played.returncode == 0, played.stderr[-2000:]
    page = tmp_path / "page.html"
    assert cli("view", "--db", str(db), "--out", str(page)).returncode == 0
    driver, downloads = browser
    _open(driver, page)
    data = embedded_data(page.read_text())
    figures = sum(len(board["figures"]) for board in data["boards"])
    assert figures >= 4 and _rendered_plots(driver) == figures
    driver.save_screenshot(str(tmp_path / "leaderboard.png"))
    cards = driver.find_elements("css selector", "details.transcript")
    assert len(cards) == 3
    cards[0].find_element("css selector", "summary").click()
    with duckdb.connect(str(db), read_only=True) as con:
        stored = one_value(
            con,
            "SELECT text FROM messages WHERE episode_id = ? AND speaker = 'player' ORDER BY idx LIMIT 1",
            cards[0].get_attribute("data-episode"),
        )
    shown = [m.text for m in cards[0].find_elements("css selector", ".message .text")]
    assert stored.strip() and stored.strip() in [text.strip() for text in shown]
    assert cards[0].find_elements("css selector", ".verdict")  # the judges' per-turn verdicts

    annotator = driver.find_element("id", "annotator")
    annotator.clear()
    annotator.send_keys("tester")
    criteria = [c["name"] for c in data["transcripts"][0]["criteria"]]
    for number, card in enumerate(cards):
        if not card.get_attribute("open"):
            card.find_element("css selector", "summary").click()
        for offset, criterion in enumerate(criteria):
            value = 1 + (number + offset) % 5
            card.find_element("css selector", f'input[data-criterion="{criterion}"][value="{value}"]').click()
    assert driver.find_element("id", "rated-count").text == "3"
    driver.save_screenshot(str(tmp_path / "rated.png"))
    driver.find_element("id", "export-labels").click()
    exported = downloads / f"labels-{data['runs'][0]['run_id']}.jsonl"
    wait_until(lambda: exported.is_file() and exported.read_text().count("\n") == 3, "the exported labels")
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert len(lines) == 3 and {row["labels"][0]["annotator"] for row in lines} == {"tester"}

    imported = cli("labels", "import", str(exported), "--format", "jsonl", "--kind", "dialogue",
                   "--name", "browser-ratings", "--db", str(db))  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    listed = cli("labels", "list", "--db", str(db), "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = [r for r in json.loads(listed.stdout) if r["label_set"] == "browser-ratings"]
    assert row["items"] == 3 and row["labels"] == 3 * len(criteria)
    with duckdb.connect(str(db), read_only=True) as con:
        values = con.execute(
            "SELECT item_id, criterion, value FROM human_labels WHERE label_set = 'browser-ratings'"
        ).fetchall()
    clicked = {
        (card.get_attribute("data-episode"), criterion, float(1 + (number + offset) % 5))
        for number, card in enumerate(cards)
        for offset, criterion in enumerate(criteria)
    }
    assert set(values) == clicked
