"""Ctrl-C during a real run: the first stops gracefully and the run resumes to its end; a second stops at once.

The real CLI in a subprocess on SmolLM2 and a real DuckDB file; SIGINT is what Ctrl-C sends.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from tests.fakes import LineReader
from tests.test_cli import APPLIANCE, REPO, cli

RUN = ["run", "--scenario", "pingpong", "--players", "smollm2-135m", "--panel", "smollm2"]
RUN += ["--limit", "3", "--turns", "1", "--parallel", "1"]


def _start(db: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*APPLIANCE, *RUN, "--db", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )


def _stderr(process: subprocess.Popen[str]) -> LineReader:
    assert process.stderr is not None
    return LineReader(process.stderr)


@pytest.mark.real_model
def test_one_ctrl_c_keeps_finished_episodes_and_the_run_resumes_to_its_end(
    tmp_path: Path, checked_store: Callable[[str], Path]
) -> None:
    db = checked_store("interrupted.duckdb")
    process = _start(db)
    stderr = _stderr(process)
    stderr.wait_for("episode 1 done")
    process.send_signal(signal.SIGINT)
    rest = stderr.rest()
    assert process.wait(timeout=600) == 130, rest
    assert "stopping: the episodes in progress finish" in rest
    message = next(line for line in rest.splitlines() if line.startswith("interrupted:"))
    stored = int(message.split()[1])
    run_id = message.split("of run ")[1].split()[0]
    assert f"appliance run --resume {run_id} --db {db}" in message
    assert 1 <= stored < 3, "the episode in progress finishes; no new one starts"
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]
        rows = con.execute("SELECT status, count(*) FROM episodes GROUP BY status").fetchall()
        orphans = con.execute("SELECT count(*) FROM messages WHERE episode_id NOT IN (SELECT episode_id FROM episodes)")
        assert rows == [("finished", stored)] and orphans.fetchone() == (0,)
    resumed = cli("run", "--resume", run_id, "--db", str(db), "--json")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout)["summary"]
    assert (summary["episodes_skipped"], summary["episodes_finished"]) == (stored, 3 - stored)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT status FROM runs").fetchall() == [("finished",)]
        assert con.execute("SELECT count(DISTINCT episode_id) FROM episodes").fetchone() == (3,)


@pytest.mark.real_model
def test_a_second_ctrl_c_stops_at_once(tmp_path: Path) -> None:
    db = tmp_path / "stopped.duckdb"
    process = _start(db)
    stderr = _stderr(process)
    stderr.wait_for("episodes to play")
    process.send_signal(signal.SIGINT)
    stderr.wait_for("stopping:")
    process.send_signal(signal.SIGINT)
    rest = stderr.rest()
    assert process.wait(timeout=600) == 130
    assert "stopped at once" in rest
    with duckdb.connect(str(db), read_only=True) as con:  # the store opens, and holds no half episode
        # with one episode live at a time, the one in progress when Ctrl-C came twice was not waited
        # for: nothing is stored (no clock decides this; an episode takes seconds, a signal microseconds)
        assert con.execute("SELECT count(*) FROM episodes").fetchone() == (0,)
        orphans = con.execute("SELECT count(*) FROM messages WHERE episode_id NOT IN (SELECT episode_id FROM episodes)")
        assert orphans.fetchone() == (0,)
