"""Kill -9 anywhere: every family's scripted run is killed, resumed, and must equal an uninterrupted run.

Each kill lands either inside an episode's store transaction (the process kills itself after the
episode row and before its messages) or at a random moment. Before resuming, every episode the
killed run left behind must already equal the uninterrupted run's (no half-written episode is
visible); after resuming, the whole store must: the same episodes, messages, verdicts and scores,
none lost, none twice. `make chaos` kills each family 20 times, half of them at random moments
(CHAOS_KILLS=20). The suite kills each family once, inside a transaction: one random-moment kill in
a CI run once left a DuckDB file that would not open (a checksum error; see docs/architecture.md),
which a suite that must pass every time cannot absorb, and which `make chaos` keeps looking for.
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

from appliance.scenarios import family_names

REPO = Path(__file__).resolve().parent.parent
HELPER = REPO / "tests" / "scripted_run.py"
KILLS = int(os.environ.get("CHAOS_KILLS", "1"))

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


def finish(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    return out


def stored_run(db: Path) -> str | None:
    if not db.exists():
        return None
    with duckdb.connect(str(db), read_only=True) as con:
        tables = {name for (name,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        row = con.execute("SELECT run_id FROM runs").fetchone() if "runs" in tables else None  # killed while migrating
    return None if row is None else str(row[0])


def within(part: dict[str, Counter[tuple[Any, ...]]], whole: dict[str, Counter[tuple[Any, ...]]]) -> list[str]:
    """Rows of `part` that `whole` lacks (or holds fewer times): what a half-written episode would leave."""
    return [f"{table}: {row}" for table, rows in part.items() for row, n in rows.items() if whole[table][row] < n]


@pytest.mark.parametrize("family", family_names())
def test_killed_runs_resume_to_the_uninterrupted_store(family: str, tmp_path: Path) -> None:
    reference_db = tmp_path / "reference.duckdb"
    process = run_helper(reference_db, family)
    started = wait_ready(process)
    finish(process)
    duration = time.perf_counter() - started
    reference = contents(reference_db)
    episodes = sum(reference["episodes"].values())
    rng = random.Random(f"chaos-{family}")
    landed: Counter[str] = Counter()
    for kill in range(KILLS):
        db = tmp_path / f"killed-{kill}.duckdb"
        if kill % 2 == 0:  # inside the store transaction of a random episode
            process = run_helper(db, family, "--kill-in-write", str(rng.randint(1, episodes)))
            process.communicate(timeout=300)
            assert process.returncode == -signal.SIGKILL, f"{family}: the kill inside a write never came"
            landed["in a transaction"] += 1
        else:  # at a random moment of the run, from outside
            process = run_helper(db, family)
            wait_ready(process)
            time.sleep(rng.uniform(0.0, duration))
            process.send_signal(signal.SIGKILL)
            process.communicate(timeout=300)
            landed["after the end" if process.returncode == 0 else "at a random moment"] += 1
        run_id = stored_run(db)
        landed["of which before the run was recorded"] += run_id is None
        if run_id is not None:
            leftover = within(contents(db), reference)
            assert not leftover, f"{family} kill {kill}: half-written rows are visible: {leftover[:3]}"
            finish(run_helper(db, family, "--resume", run_id))
        else:  # killed before the run was recorded: nothing to resume, a new run starts
            finish(run_helper(db, family))
        assert contents(db) == reference, f"{family} kill {kill}: the resumed store differs from the uninterrupted one"
    print(f"{family}: {episodes} episodes, run {duration:.2f} s; kills: {dict(landed)}")
