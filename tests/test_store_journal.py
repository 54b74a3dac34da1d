"""The journal beside the store: a store whose file is corrupted is rebuilt with nothing finished lost.

Runs are played by the scripted model into a real DuckDB file; the file is then damaged byte by byte
(or a write is left journaled but uncommitted, as a kill between the two leaves it) and the real CLI
checks, repairs and resumes it.
"""

from __future__ import annotations

import json
import random
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from appliance.errors import ApplianceError
from appliance.store import JudgmentRecord, ScoreRecord, Store
from appliance.store.instance_sets import write_instance_set
from appliance.store.journal import Journal, journal_folder, read_stream, run_stream
from appliance.store.labels import write_calibration
from appliance.store.records import CalibrationRecord
from tests.fakes import scripted_pingpong_run, store_contents
from tests.test_cli import assert_clean_error, cli

BLOCK = 262_144  # DuckDB's block; the file's three headers take the first 12,288 bytes


def _store_with_everything(db: Path) -> tuple[str, str]:
    """Two runs, one of them rescored by a second panel, an instance set and a calibration."""
    good = scripted_pingpong_run(db, "A good answer.", ["smollm2-135m"], limit=4)
    bad = scripted_pingpong_run(db, "A bad answer.", ["smollm2-135m"], limit=4)
    with Store.open(db) as store:
        (episode_id,) = store.query("SELECT episode_id FROM episodes WHERE run_id = ? LIMIT 1", [bad])[0]
        store.replace_panel_verdicts(
            episode_id,
            bad,
            "second",
            [
                JudgmentRecord(
                    panel="second",
                    judge="j",
                    mode="m",
                    target_idx=1,
                    criterion="c",
                    score=3.0,
                    raw_text="3",
                    parsed=True,
                )
            ],
            [ScoreRecord(panel="second", player="smollm2-135m", metric="final", value=3.0)],
        )
        write_instance_set(store, name="set-a", family="pingpong", source="test", seed=1, count=1, payload={"x": [1]})
        write_calibration(
            store,
            CalibrationRecord(
                calibration_id="cal-1",
                created_at=datetime(2026, 1, 2, 3, 4, 5, 678901),
                panel="p",
                judges=["j"],
                label_set="s",
                criterion="c",
                template="t",
                seed=0,
                fit_items=["a"],
                heldout_items=["b"],
                model={"kind": "identity"},
                metrics={"spearman": 0.25},
            ),
        )
    return good, bad


def _damage(db: Path, seed: int) -> None:
    """Flip bytes in every block after the headers, as a torn write or a bad disk would."""
    data = bytearray(db.read_bytes())
    rng = random.Random(seed)
    for start in range(12_288, len(data), BLOCK):
        for _ in range(8):
            data[start + rng.randrange(min(BLOCK, len(data) - start))] ^= 0xFF
    db.write_bytes(bytes(data))


def test_a_corrupted_store_is_rebuilt_from_its_journal_with_nothing_finished_lost(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    good, bad = _store_with_everything(db)
    with duckdb.connect(str(db)) as connection:
        connection.execute("CHECKPOINT")  # everything into the main file, the WAL empty
    before = store_contents(db)
    assert sum(before["episodes"].values()) == 8 and sum(before["calibrations"].values()) == 1
    _damage(db, seed=1)
    # Every command that opens it says what happened and what to run, in one line.
    for command in (("report", good), ("store", "check")):
        assert_clean_error(cli(*command, "--db", str(db)), str(db), f"appliance store repair --db {db}")
    repaired = cli("store", "repair", "--db", str(db), "--json")
    assert repaired.returncode == 0, repaired.stderr
    report = json.loads(repaired.stdout)
    assert report["rebuilt_runs"] == {good: 4, bad: 4}
    assert Path(report["moved_to"]).is_file()  # the damaged file is kept, never deleted
    assert any("could not be opened" in line for line in report["lost"])  # what no journal holds is named
    assert store_contents(db) == before
    checked = cli("store", "check", "--db", str(db))
    assert checked.returncode == 0 and "the store matches its journal" in checked.stdout, checked.stdout
    assert cli("report", bad, "--db", str(db)).returncode == 0


def test_a_write_journaled_but_not_committed_is_recovered_by_resume(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    run_id = scripted_pingpong_run(db, "A good answer.", ["smollm2-135m"], limit=3)
    before = store_contents(db)
    # a kill after the journal's fsync and before the store's commit: the episode is in the journal only
    with duckdb.connect(str(db)) as connection:
        (episode_id,) = connection.execute("SELECT max(episode_id) FROM episodes").fetchone() or ("",)
        for table in ("messages", "judgments", "scores", "episodes"):
            connection.execute(f"DELETE FROM {table} WHERE episode_id = ?", [episode_id])
    # as does a kill inside the run's finish: its record (another 1.5 s of wall time) is journaled only
    Journal(journal_folder(db)).append(
        run_stream(run_id), "finish", {"status": "finished", "wall_s": 1.5, "finished_at": "2026-01-01T00:00:00"}
    )
    with duckdb.connect(str(db), read_only=True) as connection:
        (wall_s,) = connection.execute("SELECT wall_s FROM runs").fetchone() or (0.0,)
    # and a kill inside a later append leaves half a line
    journal = journal_folder(db) / f"{run_stream(run_id)}.jsonl"
    with journal.open("ab") as handle:
        handle.write(b'0f00 {"kind":"epis')
    checked = cli("store", "check", "--db", str(db))
    assert checked.returncode == 1, checked.stdout
    assert "1 journaled episodes missing from the store; the run's own row or models differ" in checked.stdout
    # the resume plays nothing: the journal gives the episode back, so no model even loads
    resumed = cli("run", "--resume", run_id, "--db", str(db), "--json")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout)["summary"]
    assert (summary["episodes_skipped"], summary["episodes_finished"]) == (3, 0)
    after = store_contents(db)
    for table in ("episodes", "messages", "judgments", "scores"):
        assert after[table] == before[table], table
    with duckdb.connect(str(db), read_only=True) as connection:
        (resumed_wall_s,) = connection.execute("SELECT wall_s FROM runs").fetchone() or (0.0,)
    assert resumed_wall_s > wall_s + 1.5  # the journaled finish, then the resume's own
    checked = cli("store", "check", "--db", str(db))
    assert checked.returncode == 0 and "1 torn or damaged journal lines skipped" in checked.stdout, checked.stdout
    # the torn line stays a line of its own: the records after it read back whole
    stream = read_stream(journal)
    assert len(stream.damaged_lines) == 1 and stream.records[-1].kind == "finish"


def test_a_healthy_store_rebuilt_keeps_runs_without_a_journal(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    _store_with_everything(db)
    # a run from before journals existed: its rows are in the store only (copied from another file)
    old = scripted_pingpong_run(tmp_path / "other.duckdb", "A good answer.", ["smollm2-135m"], limit=2)
    with duckdb.connect(str(db)) as connection:
        connection.execute(f"ATTACH '{tmp_path / 'other.duckdb'}' AS other (READ_ONLY)")
        for table in ("runs", "models", "episodes", "messages", "judgments", "scores"):
            connection.execute(f"INSERT INTO {table} SELECT * FROM other.{table}")
    before = store_contents(db)
    unjournaled = cli("store", "check", "--db", str(db))
    assert unjournaled.returncode == 0 and f"runs without a journal (made before journals): {old}" in unjournaled.stdout
    repaired = cli("store", "repair", "--db", str(db), "--json")
    assert repaired.returncode == 0, repaired.stderr
    report = json.loads(repaired.stdout)
    assert report["copied_runs"] == [old] and report["lost"] == [] and "label_sets" in report["copied_tables"]
    assert store_contents(db) == before


def test_appends_are_whole_lines_with_checksums(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j")
    journal.append("s", "episode", {"a": 1, "z": [1, 2]})
    path = tmp_path / "j" / "s.jsonl"
    path.write_bytes(path.read_bytes() + b"deadbeef {")  # torn
    journal.append("s", "finish", {"b": "two"})
    lines = path.read_bytes().split(b"\n")
    assert len(lines) == 4 and lines[-1] == b""  # the torn piece ended on its own line
    stream = read_stream(path)
    assert [(r.kind, r.body) for r in stream.records] == [("episode", {"a": 1, "z": [1, 2]}), ("finish", {"b": "two"})]
    assert stream.damaged_lines == [2]
    # a flipped character fails its line's checksum, not the others'
    path.write_bytes(path.read_bytes().replace(b'"two"', b'"twx"'))
    assert [r.kind for r in read_stream(path).records] == ["episode"]


def test_bad_input_to_store_commands(tmp_path: Path) -> None:
    missing = tmp_path / "none.duckdb"
    assert_clean_error(cli("store", "repair", "--db", str(missing)), str(missing), "no journal")
    assert_clean_error(cli("store", "check", "--db", str(missing)), str(missing), "not found")


def test_a_journal_that_cannot_be_written_stops_the_write_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "runs.duckdb"
    journal_folder(db).write_text("a file where the journal's folder should be")
    with pytest.raises(ApplianceError, match=r"runs\.duckdb\.journal/run-.*: cannot write the store's journal"):
        scripted_pingpong_run(db, "A good answer.", ["smollm2-135m"], limit=1)
    with duckdb.connect(str(db), read_only=True) as connection:  # the store did not take what was not journaled
        assert connection.execute("SELECT count(*) FROM runs").fetchone() == (0,)
