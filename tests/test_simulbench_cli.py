"""SimulBench through the real CLI on the embedded models: all three stages on one task, and
SimulBench's published scripts imported and evaluated."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from appliance.scenarios.simulbench.user_agent import STRATEGIES, parse_strategy_reply
from tests.fakes import one
from tests.test_cli import REPO, assert_clean_error, cli

PEERS = REPO.parent / "shared" / "datasets" / "peers" / "simulbench"
PLAYERS = "smollm2-135m,gemma3-270m"

ONE_TASK = """type = "stateless"

[[tasks]]
id = "roman"
name = "Roman numeral converter"
description = "Convert between Arabic numbers and Roman numerals. Answer with the converted value only."
first_request = "XIV"
request_type = "numbers and numerals"
"""


def short_settings() -> str:
    """Our prompts with one dialogue of two turns and short replies, to keep the test quick."""
    text = (REPO / "scenarios" / "simulbench" / "prompts.toml").read_text()
    for key, value in [
        ("dialogues_per_task", 1),
        ("max_turns", 2),
        ("user_agent_max_tokens", 40),
        ("simulator_max_tokens", 24),
        ("target_max_tokens", 24),
    ]:
        text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, count=1, flags=re.MULTILINE)
    return str(text)


@pytest.mark.real_model
def test_all_three_stages_on_one_task_with_the_embedded_models(tmp_path: Path) -> None:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "roman.toml").write_text(ONE_TASK)
    (folder / "prompts.toml").write_text(short_settings())
    db = str(tmp_path / "sb.duckdb")
    result = cli("run", "--scenario", f"simulbench:{folder}", "--players", PLAYERS, "--db", db, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    (report,) = json.loads(result.stdout)["leaderboards"]
    with duckdb.connect(db, read_only=True) as con:
        stages = dict(
            con.execute("SELECT split_part(instance_id, '/', 1), count(*) FROM episodes GROUP BY ALL").fetchall()
        )
        speakers = [
            s
            for (s,) in con.execute(
                "SELECT speaker FROM messages m JOIN episodes e USING (episode_id) "
                "WHERE e.instance_id LIKE 'collect/%' ORDER BY idx"
            ).fetchall()
        ]
        agent = con.execute("SELECT text, finish_reason FROM messages WHERE speaker = 'user_agent'").fetchall()
        checks = con.execute(
            "SELECT count(*), count(*) FILTER (parsed) FROM judgments j JOIN episodes e USING (episode_id) "
            "WHERE e.instance_id LIKE 'extract/%'"
        ).fetchone()
        scripts = json.loads(one(con, "SELECT metadata FROM episodes WHERE instance_id LIKE 'extract/%'")[0])["scripts"]
    assert stages["collect"] == 1 and stages["extract"] == 1
    assert speakers.count("simulator") == 2, speakers  # the opening and one user agent request answered
    for text, finish in agent:  # the grammar keeps the JSON valid; a reply the 40-token cap cut keeps its request
        if text.isascii():
            assert parse_strategy_reply(text, cut=finish == "length").strategy in STRATEGIES
    assert checks == (4, 4)  # 2 turns x 2 judges, every verdict well-formed
    assert 1 <= len(scripts) <= 2
    assert stages["evaluate"] == 2 * len(scripts) and stages["compare"] == len(scripts)
    rows = {row["player"]: row for row in report["rows"]}
    assert set(rows) == {"smollm2-135m", "gemma3-270m"}
    assert report["common_scripts"] + report["perfect_dropped"] + report["incomplete_scripts"] == len(scripts)
    for row in rows.values():
        assert row["all"]["n"] == report["common_scripts"]  # every model on the same scripts
        assert row["all"]["mean"] is None or 1.0 <= row["all"]["mean"] <= 10.0
    with duckdb.connect(db, read_only=True) as con:
        ratings = con.execute(
            "SELECT count(*), count(*) FILTER (parsed) FROM judgments j JOIN episodes e USING (episode_id) "
            "WHERE e.instance_id LIKE 'evaluate/%'"
        ).fetchone()
        read = con.execute(
            "SELECT mode, score, raw_text FROM judgments WHERE template = 'simulbench_rating'"
        ).fetchall()
    assert ratings == (2 * 2 * len(scripts), 2 * 2 * len(scripts))  # every rating read
    # the default panel reads its ratings from the judges' probabilities (nothing sampled), so they vary
    assert {mode for mode, _, _ in read} == {"expected"}
    assert all(1.0 <= score <= 10.0 for _, score, _ in read) and len({score for _, score, _ in read}) > 1
    assert all(sum(json.loads(raw)[f"p_{v}"] for v in range(1, 11)) == pytest.approx(1.0) for _, _, raw in read)
    # a script every model answered perfectly leaves the comparison, as in the paper, and is counted
    assert 0 <= report["perfect_dropped"] <= len(scripts)
    in_pairs = [p["compared"] + p["undecided"] for p in report["pairs"] if p["subset"] == "all"]
    assert in_pairs == ([len(scripts) - report["perfect_dropped"]] if report["perfect_dropped"] < len(scripts) else [])
    assert report["collection"]["dialogues"] == 1 and sum(report["collection"]["scripts"].values()) == len(scripts)
    # the default panel reads each comparison as PandaLM's pairs were read, and the shipped pairwise
    # calibration decides it: its id on every outcome, a decision in -1, 0, +1, its evidence in the report
    with duckdb.connect(db, read_only=True) as con:
        outcomes = con.execute(
            "SELECT value, calibrated_value, calibration_id FROM scores s JOIN episodes e USING (episode_id) "
            "WHERE e.instance_id LIKE 'compare/%' AND metric = 'pair_outcome'"
        ).fetchall()
        read = con.execute(
            "SELECT DISTINCT judge, template FROM judgments j JOIN episodes e USING (episode_id) "
            "WHERE e.instance_id LIKE 'compare/%' AND criterion = 'preference' AND parsed"
        ).fetchall()
    assert sorted(read) == [("gemma3-270m", "instruction_likelihood"), ("smollm2-135m", "instruction_likelihood")]
    assert len(outcomes) == len(scripts)
    assert all(calibrated in (-1.0, 0.0, 1.0) and (cal or "").startswith("cal-") for _, calibrated, cal in outcomes)
    text = cli("report", "--db", db)
    assert text.returncode == 0 and "hard subset" in text.stdout and "pairwise" in text.stdout
    assert "decided by the panel's preference calibrated on pandalm" in " ".join(text.stdout.split())
    judged = json.loads(cli("report", "--db", db, "--json").stdout)[0]["judged_figures"]
    pairwise = next(figure for figure in judged if figure["figure"] == "simulbench.pairwise")
    assert pairwise["calibration"].startswith("calibrated on pandalm / preference")


@pytest.mark.real_model
def test_published_scripts_are_imported_and_a_subset_evaluated(tmp_path: Path) -> None:
    path = PEERS / "simulbench_all.jsonl"
    if not path.is_file():
        pytest.skip(f"SimulBench's published scripts are not here: {path} (../shared absent)")
    db = str(tmp_path / "sb.duckdb")
    imported = cli("import", "simulbench-scripts", str(path), "--db", db)
    assert imported.returncode == 0, imported.stderr
    assert "stored 500 scripts" in imported.stdout and "LastOnly 225" in imported.stdout
    bad = cli("run", "--scenario", "simulbench:no-such-set", "--players", "smollm2-135m", "--db", db)
    assert_clean_error(bad, "no-such-set")
    result = cli(
        "run",
        "--scenario",
        "simulbench:simulbench-scripts",
        "--players",
        "smollm2-135m",
        "--limit",
        "2",
        "--seed",
        "3",
        "--db",
        db,
        "--json",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (report,) = json.loads(result.stdout)["leaderboards"]
    (row,) = report["rows"]
    assert row["all"]["n"] + row["unrated"] + report["perfect_dropped"] == 2
    assert report["pairs"] == [] and report["collection"] is None
    with duckdb.connect(db, read_only=True) as con:
        stages = con.execute("SELECT DISTINCT split_part(instance_id, '/', 1) FROM episodes").fetchall()
        loaded = sorted(name for (name,) in con.execute("SELECT name FROM models").fetchall())
    assert stages == [("evaluate",)]
    assert loaded == ["gemma3-270m", "smollm2-135m"]  # the player and the judge panel; no user agent needed
