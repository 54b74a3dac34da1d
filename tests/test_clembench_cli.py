"""clembench through the real CLI: every game on the embedded SmolLM2, stored instance sets,
and clembench's published results imported and aggregated."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from appliance.scenarios.clembench.games import variant_names
from tests.fakes import one
from tests.test_cli import REPO, cli

GAMES = tuple(variant_names())

GOLDEN = REPO.parent / "shared" / "datasets" / "peers" / "clemcore_golden_run"


@pytest.mark.real_model
def test_every_game_plays_on_smollm2_from_a_stored_instance_set(tmp_path: Path) -> None:
    db = str(tmp_path / "cb.duckdb")
    generated = cli("scenarios", "generate", "clembench", "--seed", "7", "--per-experiment", "2", "--db", db)
    assert generated.returncode == 0, generated.stderr[-2000:]
    assert "clembench-seed-7" in generated.stdout
    again = cli("scenarios", "generate", "clembench", "--seed", "7", "--per-experiment", "2", "--db", db)
    assert again.returncode == 0 and "already stored" in again.stdout
    result = cli(
        "run",
        "--scenario",
        "clembench:clembench-seed-7",
        "--players",
        "smollm2-135m",
        "--limit",
        "1",
        "--db",
        db,
        "--json",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (report,) = json.loads(result.stdout)["leaderboards"]
    (row,) = report["rows"]
    rows = len(GAMES) + 6  # --limit 1 per game row; the reference game in each other language is a row of its own
    assert row["player"] == "smollm2-135m" and row["episodes"] == rows and row["failed"] == 0
    # a game in another language is a row of its own (referencegame_de): its base game is still one of GAMES
    assert {re.sub(r"_(de|it|pt|tr|zh|ja)$", "", game["game"]) for game in row["games"]} == set(GAMES)
    for game in row["games"]:  # every episode ended one way: won, lost or aborted
        assert game["won"] + game["lost"] + game["aborted"] == game["episodes"] == 1
    assert 0.0 <= row["played"] <= 100.0 and row["clemscore"] is not None
    with duckdb.connect(db, read_only=True) as con:
        per_episode = con.execute(
            """SELECT e.instance_id, count(*) FILTER (m.model = 'smollm2-135m' AND m.completion_tokens > 0),
                      count(*) FILTER (m.speaker LIKE 'gm>%')
               FROM episodes e JOIN messages m USING (episode_id) GROUP BY e.instance_id"""
        ).fetchall()
        loaded = [name for (name,) in con.execute("SELECT name FROM models").fetchall()]
        cut = one(con, "SELECT count(*) FROM messages WHERE finish_reason = 'length' AND model = 'smollm2-135m'")[0]
        sets = one(con, "SELECT count(*) FROM instance_sets")[0]
    assert len(per_episode) == rows
    assert sum(game["cut_replies"] for game in row["games"]) == cut  # replies that hit their cap are counted
    assert all(replies >= 1 and prompts >= replies for _, replies, prompts in per_episode)
    assert loaded == ["smollm2-135m"], "a rule-scored family loads no judge"
    assert sets == 1
    text = cli("report", "--db", db)
    assert text.returncode == 0 and "clemscore" in text.stdout and "wordle_withcritic" in text.stdout


def test_bad_instance_source_and_results_path_exit_2(tmp_path: Path) -> None:
    db = str(tmp_path / "bad.duckdb")
    missing = cli("run", "--scenario", "clembench:nothing-here", "--players", "smollm2-135m", "--db", db)
    assert missing.returncode == 2 and "nothing-here" in missing.stderr and "Traceback" not in missing.stderr
    results = cli("import", "clembench-results", str(tmp_path / "absent.zip"), "--db", db)
    assert results.returncode == 2 and "absent.zip" in results.stderr


@pytest.mark.skipif(not GOLDEN.is_dir(), reason=f"clemcore's golden run is not at {GOLDEN}")
def test_published_results_import_and_report(tmp_path: Path) -> None:
    db = str(tmp_path / "golden.duckdb")
    imported = cli("import", "clembench-results", str(GOLDEN / "runs-v2-llama8b.zip"), "--db", db)
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert "817 episodes" in imported.stdout
    run_id = imported.stdout.split(" as run ")[1].split(";")[0]
    twice = cli("import", "clembench-results", str(GOLDEN / "runs-v2-llama8b.zip"), "--db", db)
    assert "already imported" in twice.stdout
    report = cli("report", run_id, "--db", db, "--json")
    (board,) = json.loads(report.stdout)
    (row,) = board["rows"]
    assert round(row["clemscore"], 2) == 28.09 and round(row["played"], 1) == 56.8
    assert round(row["quality"], 2) == 49.46
