"""Kill -9 anywhere: every family's scripted run is killed, resumed, and must equal an uninterrupted run.

One kill in four lands inside an episode's store transaction (the process kills itself after the
journal's record and the episode row, before its messages). The others come from outside at a
random moment, a third each: of the whole process (its setup and the schema's migrations too), of
the run once it writes, and of a run that checkpoints after every commit (so kills land in
checkpoints). The last two are placed by progress rather than by the clock, so that a loaded machine
does not push them past the run's end: after a random record of the run's journal, within one
record's share of the uninterrupted run's time. After a kill the store must open, or be rebuilt by
`appliance store repair` from its journal; every episode it holds must already equal the uninterrupted run's (no
half-written episode is visible); the run is resumed (from the journal where the kill came before
the run's first commit), and then the whole store must equal the uninterrupted run's: the same
episodes, messages, verdicts and scores, none lost, none twice, and `store check` must find it
matching its journal. `make chaos` kills each family 160 times (CHAOS_KILLS=160: 120 at random
moments, of which some land after the run ended; they are counted apart); the suite twice (one in
a transaction, one at a random moment of the process).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest

from appliance.errors import ApplianceError
from appliance.scenarios import family_names
from appliance.store import Store
from appliance.store.journal import Journal, journal_folder
from appliance.store.repair import check_store, journaled_run_id
from tests.test_cli import cli

REPO = Path(__file__).resolve().parent.parent
HELPER = REPO / "tests" / "scripted_run.py"
KILLS = int(os.environ.get("CHAOS_KILLS", "2"))

#: what must match between runs: everything but ids, timings and token latencies
EPISODES = (
    "SELECT scenario, instance_id, player, player_model, partner_model, status, seed, error, "
    "CAST(metadata AS VARCHAR) FROM episodes"
)
MESSAGES = (
    "SELECT e.instance_id, e.player, m.idx, m.speaker, m.model, m.text, m.finish_reason, m.completion_tokens "
    "FROM messages m JOIN episodes e USING (episode_id)"
)
JUDGMENTS = (
    "SELECT e.instance_id, e.player, j.panel, j.judge, j.mode, j.template, j.target_idx, j.criterion, j.score, "
    "j.raw_text, j.parsed, j.order_swapped FROM judgments j JOIN episodes e USING (episode_id)"
)
SCORES = (
    "SELECT e.instance_id, e.player, s.panel, s.player, s.metric, s.value, s.calibrated_value, s.calibration_id "
    "FROM scores s JOIN episodes e USING (episode_id)"
)


def contents(db: Path) -> dict[str, Counter[tuple[Any, ...]]]:
    """Every table as a multiset of rows, so a duplicated row shows."""
    tables = {"episodes": EPISODES, "messages": MESSAGES, "judgments": JUDGMENTS, "scores": SCORES}
    with duckdb.connect(str(db), read_only=True) as con:
        return {name: Counter(con.execute(sql).fetchall()) for name, sql in tables.items()}


def run_helper(db: Path, family: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HELPER), str(db), family, *extra],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_ready(process: subprocess.Popen[str]) -> float:
    """Wait for the helper's imports; the time the run itself starts."""
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return time.perf_counter()


def wait_journaled(db: Path, process: subprocess.Popen[str], records: int = 1) -> float:
    """Wait until the run has journaled `records` records (or the process ended); the time then."""
    while process.poll() is None and journal_lines(db) < records:
        time.sleep(0.002)
    return time.perf_counter()


def journal_lines(db: Path) -> int:
    """Records (lines) the run's journal holds so far."""
    return sum(path.read_bytes().count(b"\n") for path in journal_folder(db).glob("run-*.jsonl"))


def finish(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    return out


def open_or_repair(db: Path) -> bool:
    """Open the store as the appliance would and read it whole; where DuckDB cannot, repair it with
    the CLI. True when it had to be repaired."""
    if not db.exists():
        return False
    try:
        with Store.open(db) as store:
            for (table,) in store.query("SELECT table_name FROM information_schema.tables"):
                store.query(f'SELECT * FROM "{table}"')
        return False
    except (ApplianceError, duckdb.Error):
        repaired = cli("store", "repair", "--db", str(db))
        assert repaired.returncode == 0, repaired.stderr
        return True


def run_to_resume(db: Path) -> str | None:
    """The killed run: as stored, or as journaled where the kill came before its first commit."""
    if db.exists():
        with duckdb.connect(str(db), read_only=True) as con:
            tables = {name for (name,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
            row = con.execute("SELECT run_id FROM runs").fetchone() if "runs" in tables else None
        if row is not None:
            return str(row[0])
    streams = [s for s in Journal(journal_folder(db)).streams() if s.is_run]
    return journaled_run_id(streams[0]) if streams else None


def within(part: dict[str, Counter[tuple[Any, ...]]], whole: dict[str, Counter[tuple[Any, ...]]]) -> list[str]:
    """Rows of `part` that `whole` lacks (or holds fewer times): what a half-written episode would leave."""
    return [f"{table}: {row}" for table, rows in part.items() for row, n in rows.items() if whole[table][row] < n]


@pytest.mark.parametrize("family", family_names())
def test_killed_runs_resume_to_the_uninterrupted_store(family: str, tmp_path: Path) -> None:
    reference_db = tmp_path / "reference.duckdb"
    process = run_helper(reference_db, family)
    started = wait_ready(process)
    writing = wait_journaled(reference_db, process)
    finish(process)
    setup, duration = writing - started, time.perf_counter() - writing
    records = journal_lines(reference_db)
    reference = contents(reference_db)
    episodes = sum(reference["episodes"].values())
    rng = random.Random(f"chaos-{family}")
    landed: Counter[str] = Counter()
    for kill in range(KILLS):
        db = tmp_path / f"killed-{kill}.duckdb"
        if kill % 4 == 0:  # inside the store transaction of a random episode
            process = run_helper(db, family, "--kill-in-write", str(rng.randint(1, episodes)))
            process.communicate(timeout=300)
            assert process.returncode == -signal.SIGKILL, f"{family}: the kill inside a write never came"
            landed["in a transaction"] += 1
        else:  # at a random moment, from outside: of the whole process (its schema's migrations
            # included), or of the run once it writes, or of a run that checkpoints after each commit
            moment = ("", "at a random moment of the process", "at a random moment of the run", "while checkpointing")
            checkpointing = kill % 4 == 3
            process = run_helper(db, family, *(["--checkpoint-every-commit"] if checkpointing else []))
            wait_ready(process)
            if kill % 4 == 1:
                time.sleep(rng.uniform(0.0, setup + duration))
            else:  # by progress, not the clock: after a random record of the run, within a record's time
                wait_journaled(db, process, rng.randint(1, records))
                time.sleep(rng.uniform(0.0, duration / records))
            process.send_signal(signal.SIGKILL)
            process.communicate(timeout=300)
            landed["after the end" if process.returncode == 0 else moment[kill % 4]] += 1
        landed["of which left a store that had to be repaired"] += open_or_repair(db)
        run_id = run_to_resume(db)
        landed["of which before the run was journaled"] += run_id is None
        if db.exists():
            leftover = within(contents(db), reference)
            assert not leftover, f"{family} kill {kill}: half-written rows are visible: {leftover[:3]}"
        if run_id is not None:
            finish(run_helper(db, family, "--resume", run_id))
        else:  # killed before the run was journaled: nothing to resume, a new run starts
            finish(run_helper(db, family))
        assert contents(db) == reference, f"{family} kill {kill}: the resumed store differs from the uninterrupted one"
        check = check_store(db)
        assert check.ok, f"{family} kill {kill}: {[run.describe() for run in check.runs]} {check.other_problems}"
    print(f"{family}: {episodes} episodes, setup {setup:.2f} s, run {duration:.2f} s; kills: {dict(landed)}")
