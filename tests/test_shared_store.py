"""One store, several processes: runs hold the file only while writing, everyone else waits and retries.

A process that holds the lock makes an opener wait (and succeed once it lets go) or fail with one
line after $APPLIANCE_LOCK_WAIT_S. Two scripted runs and a stream of `appliance report` calls
share one file and all succeed, and the reports show the live run's progress; the same with two
real runs on SmolLM2.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from appliance.errors import ApplianceError
from appliance.store import Store
from tests.test_cli import REPO, cli

HELPER = REPO / "tests" / "scripted_run.py"


def hold_lock(db: Path, seconds: float | None) -> subprocess.Popen[str]:
    """Another process that opens the file for writing and keeps it for `seconds`, or (None) until its
    stdin is closed: a test that needs the lock held while a slow subprocess starts says when to let go."""
    code = (
        "import duckdb, sys, time\n"
        "con = duckdb.connect(sys.argv[1])\n"
        "print('held', flush=True)\n"
        "time.sleep(float(sys.argv[2])) if sys.argv[2] != 'stdin' else sys.stdin.read()\n"
    )
    held = "stdin" if seconds is None else str(seconds)
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(db), held], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def test_an_opener_waits_for_the_lock_then_fails_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "busy.duckdb"
    Store.open(db).close()
    holder = hold_lock(db, 1.5)
    started = time.monotonic()
    with Store.open(db, read_only=True) as store:  # waits for the holder to exit, then reads
        assert store.schema_version() > 0
    assert time.monotonic() - started > 0.5
    holder.wait()
    monkeypatch.setenv("APPLIANCE_LOCK_WAIT_S", "0.3")
    holder = hold_lock(db, None)  # held until the CLI has failed, however long its start takes
    try:
        with pytest.raises(ApplianceError, match=r"busy.duckdb: another process kept the database busy for 0.3 s"):
            Store.open(db, read_only=True)
        result = cli("report", "--db", str(db))
        assert result.returncode == 2 and "APPLIANCE_LOCK_WAIT_S" in result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)


def _stored_runs(db: Path) -> list[tuple[str, str]]:
    with Store.open(db, read_only=True) as store:
        return [(str(r), str(s)) for r, s in store.query("SELECT run_id, status FROM runs ORDER BY run_id")]


def test_two_runs_and_live_reports_share_one_store(tmp_path: Path, checked_store: Callable[[str], Path]) -> None:
    db = checked_store("shared.duckdb")
    Store.open(db).close()
    go = tmp_path / "go"  # the runs hold their requests after their first stored episode until it exists
    helper = [sys.executable, str(HELPER), str(db), "clembench", "--delay", "0.02", "--wait-for", str(go)]
    runs = [
        subprocess.Popen(
            [*helper, "--seed", str(seed)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    reports: list[subprocess.CompletedProcess[str]] = []
    deadline = time.monotonic() + 300
    while any(run.poll() is None for run in runs):
        assert time.monotonic() < deadline, "the runs did not finish within 300 s"
        live = [run_id for run_id, status in _stored_runs(db) if status == "running"]
        if live:
            reports.append(cli("report", live[0], "--db", str(db)))
            if " running: " in reports[-1].stdout and " episodes stored " in reports[-1].stdout:
                go.touch()  # a live report was seen: let the runs finish
        time.sleep(0.1)
    finished: dict[str, tuple[int, int]] = {}
    for run in runs:
        out, err = run.communicate()
        assert run.returncode == 0, err[-2000:]
        run_id, done, total = out.splitlines()[-1].split()  # after "ready": the run id and its counts
        finished[run_id] = (int(done), int(total))
    assert len(finished) == 2 and all(done == total > 0 for done, total in finished.values())
    assert sorted(_stored_runs(db)) == sorted((run_id, "finished") for run_id in finished)
    assert reports and all(r.returncode == 0 for r in reports), [r.stderr for r in reports if r.returncode]
    assert any(" running: " in r.stdout and " episodes stored " in r.stdout for r in reports)
    with duckdb.connect(str(db), read_only=True) as con:
        counts = dict(con.execute("SELECT run_id, count(*) FROM episodes GROUP BY 1").fetchall())
    assert counts == {run_id: total for run_id, (_, total) in finished.items()}


@pytest.mark.real_model
def test_two_real_runs_into_one_store_both_complete(tmp_path: Path, checked_store: Callable[[str], Path]) -> None:
    db = checked_store("real.duckdb")
    models = tmp_path / "models.toml"  # one thread each: two runs on two cores, not four threads fighting
    text = (REPO / "models.toml").read_text()
    models.write_text(text.replace("slots = 32\n", "slots = 32\nthreads = 1\n", 1))
    command = [
        sys.executable, "-m", "appliance", "run", "--scenario", "pingpong", "--players", "smollm2-135m",
        "--panel", "smollm2", "--limit", "1", "--turns", "1", "--db", str(db), "--models", str(models),
    ]  # fmt: skip
    environment = {**os.environ, "APPLIANCE_LOCK_WAIT_S": "120"}
    runs = [
        subprocess.Popen([*command, "--seed", str(seed)], cwd=REPO, env=environment, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for seed in (1, 2)
    ]  # fmt: skip
    for run in runs:
        _, err = run.communicate(timeout=600)
        assert run.returncode == 0, err[-2000:]
    stored = _stored_runs(db)
    assert len(stored) == 2 and {status for _, status in stored} == {"finished"}
    for run_id, _ in stored:
        report = cli("report", run_id, "--db", str(db))
        assert report.returncode == 0 and "smollm2-135m" in report.stdout


def _open_new_stores_in_step(folder: str, rounds: int, barrier: Any, failures: Any) -> None:
    """One of several processes that open the same new store at the same moment, round after round."""
    from appliance.store import Store

    for round_number in range(rounds):
        barrier.wait()
        try:
            with Store.open(Path(folder) / f"new-{round_number}.duckdb") as store:
                store.schema_version()
        except Exception as error:  # reported to the test, which names it
            failures.put(f"round {round_number}: {error}")


def test_processes_that_create_one_new_store_together_all_open_it(tmp_path: Path) -> None:
    """DuckDB writes a new file's header after creating it; an opener in between must not see half a file."""
    context = multiprocessing.get_context("spawn")
    processes, rounds = 6, 12
    barrier, failures = context.Barrier(processes), context.Queue()
    workers = [
        context.Process(target=_open_new_stores_in_step, args=(str(tmp_path), rounds, barrier, failures))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    assert [worker.exitcode for worker in workers] == [0] * processes
    reported = []
    while not failures.empty():
        reported.append(failures.get())
    assert reported == []
    databases = {f"new-{round_number}.duckdb" for round_number in range(rounds)}
    left = {path.name for path in tmp_path.iterdir()}
    beside = {f"{name}{suffix}" for name in databases for suffix in (".wal", ".lock", ".lock.wait")}
    assert left - beside == databases  # no staging copy left beside them


#: the real CLI, with the store's writes of a run's first episode (and, with "unrepairable", of its rebuild too)
#: dropped after the journal has them: what the lost commit of issue 74 looked like from outside
LOSSY_CLI = """
import sys
from appliance.store import repair
from appliance.store.store import Store

original, dropped = Store._write_episode_rows, []

def lossy(self, episode):
    if not dropped:
        dropped.append(episode.episode_id)
        return
    original(self, episode)

Store._write_episode_rows = lossy
if sys.argv[1] == "unrepairable":
    repair._rebuild_run = lambda store, run_id, stream: None
sys.argv = ["appliance", *sys.argv[2:]]
from appliance.cli.main import main
main()
"""


@pytest.mark.real_model
def test_a_run_whose_store_lost_an_episode_restores_it_from_the_journal_and_says_so(
    tmp_path: Path, checked_store: Callable[[str], Path]
) -> None:
    db = checked_store("lossy.duckdb")
    command = [
        "run", "--scenario", "pingpong", "--players", "smollm2-135m", "--panel", "smollm2",
        "--limit", "2", "--turns", "1", "--db", str(db),
    ]  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", LOSSY_CLI, "repairable", *command], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    restored = [line for line in result.stderr.splitlines() if "restored from its journal" in line]
    assert len(restored) == 1 and "1 journaled episodes missing from the store (" in restored[0], result.stderr
    with Store.open(db, read_only=True) as store:
        (run_id,) = [r for (r,) in store.query("SELECT run_id FROM runs")]
        assert store.episode_count(run_id) == 2 and run_id in restored[0]
    # where the rebuild cannot take, the run says what still differs and fails with exit 3
    db = checked_store("unrepairable.duckdb")
    command[command.index("--db") + 1] = str(db)
    result = subprocess.run(
        [sys.executable, "-c", LOSSY_CLI, "unrepairable", *command], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 3, result.stderr[-2000:]
    assert "1 journaled episodes missing from the store; the store does not hold what the run journaled" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
    # the fixture's own `store check` would fail on this one: the repair it names makes it whole
    assert cli("store", "repair", "--db", str(db)).returncode == 0


def test_the_store_lock_spans_duckdb_open_to_close(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer of this process holds `<db>.lock`; another process's reader waits for it, even where DuckDB's own
    lock would let it in (it is gone the moment any descriptor of the file closes), and gets in once it goes."""
    db = tmp_path / "locked.duckdb"
    Store.open(db).close()
    monkeypatch.setenv("APPLIANCE_LOCK_WAIT_S", "0.5")
    with Store.open(db) as writer:
        writer.schema_version()
        open(db, "rb").close()  # drops this process's POSIX record lock on the file: DuckDB's lock
        result = cli("report", "--db", str(db))
        assert result.returncode == 2 and "another appliance process holds the store's lock" in result.stderr
        with Store.open(db) as second:  # the same process shares its hold, as DuckDB shares its instance
            assert second.schema_version() == writer.schema_version()
    assert "no runs stored yet" in cli("report", "--db", str(db)).stderr  # let go on close: the reader gets in


def test_a_live_run_before_its_first_stored_episode_reports_its_running_line(tmp_path: Path) -> None:
    """Killed inside its first episode's transaction, the run is stored as running with no episode: the
    report is the running line and the families still waiting, exit 0 (once it was exit 2, "no episodes")."""
    db = tmp_path / "live.duckdb"
    killed = subprocess.run(
        [sys.executable, str(HELPER), str(db), "pingpong", "--kill-in-write", "1"], capture_output=True, timeout=300
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    (run_id, status), *_ = _stored_runs(db)
    assert status == "running"
    for as_json in ([], ["--json"]):
        result = cli("report", run_id, "--db", str(db), *as_json)
        assert result.returncode == 0, result.stderr
        said = result.stderr if as_json else result.stdout
        assert f"run {run_id} running: 0 of " in said and "no episodes stored yet of: pingpong" in said, said
        if as_json:
            assert json.loads(result.stdout) == []
