"""`appliance run --ray`: episodes played by Ray workers store what one process stores.

A local Ray cluster of two workers (one CPU each) plays the scripted PingPong and clembench runs;
the stored runs must equal the single-process runs of the same seed recorded in
tests/data/golden_runs.json. One worker is SIGKILLed while it holds episodes: they are replayed by
the other with the same seeds, and the store is still identical. A driver killed inside a store
transaction leaves a run that `--resume` finishes on Ray workers. A worker that cannot load a model
fails the run in one line naming the worker and the model, with nothing stored. The real-model
round trip is in tests/test_cli.py (two runs with the same seed).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.catalog.models import Catalog
from appliance.cluster.ray_cluster import ClusterOptions
from appliance.engine.types import GenerationRequest
from appliance.errors import ApplianceError
from appliance.run.runner import Runner, RunSummary
from appliance.store import Store
from appliance.store.journal import journal_folder
from appliance.store.merge import merge_shards
from tests.fakes import scripted_factory, seed_echo
from tests.golden_runs import GOLDEN, canonical, scripted_run
from tests.test_chaos import finish, run_helper, run_to_resume
from tests.test_sharding import _as_rows

pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]'): the cluster tests need it")

TWO_WORKERS = ClusterOptions("local", workers=2, cpus_per_worker=1)


def slow_echo(model: str, request: GenerationRequest) -> str:
    """The seed echo, a little slow, so that a worker holds unfinished episodes when it is killed."""
    time.sleep(0.02)
    return seed_echo(model, request)


class RecordingRunner(Runner):
    """A runner that keeps the summary of what it ran (the stored-run helper returns only the store)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.summaries: list[RunSummary] = []
        #: what `played_by_worker` said as each episode was stored (the CLI's progress shows it)
        self.shares: list[dict[str, int]] = []

    def execute(self, *args: Any, **kwargs: Any) -> RunSummary:
        kwargs["on_episode"] = lambda record: self.shares.append(self.played_by_worker())
        self.summaries.append(super().execute(*args, **kwargs))
        return self.summaries[-1]


def golden(family: str) -> dict[str, list[str]]:
    return _as_rows(json.loads(GOLDEN.read_text(encoding="utf-8"))[f"scripted:{family}"])


@pytest.mark.parametrize("family", ["pingpong", "clembench", "simulbench"])
def test_two_ray_workers_store_what_one_process_stores(family: str, tmp_path: Path) -> None:
    runners: list[RecordingRunner] = []

    def on_ray(catalog: Catalog, store: Store) -> Runner:
        runners.append(RecordingRunner(catalog, store, scripted_factory(seed_echo), cluster=TWO_WORKERS))
        return runners[-1]

    stored = scripted_run(tmp_path / "ray.duckdb", family, runner=on_ray)
    assert _as_rows(stored) == golden(family)
    (summary,) = runners[0].summaries
    assert sorted(summary.workers) == ["w1", "w2"] and all(summary.workers.values()), summary.workers
    assert sum(summary.workers.values()) == summary.episodes_finished == len(stored["episodes"])
    # live progress: as each episode is stored, the workers' shares so far add up to the episodes stored
    assert [sum(share.values()) for share in runners[0].shares] == list(range(1, len(stored["episodes"]) + 1))
    assert runners[0].shares[-1] == summary.workers and runners[0].played_by_worker() == {}


def killer(db: Path, pids: dict[str, int], worker: str) -> threading.Thread:
    """A started thread that SIGKILLs `worker` (its pid once it is ready) after the first stored episode."""

    def kill_once_an_episode_is_stored() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            episodes = sum(path.read_text().count('"kind":"episode"') for path in journal_folder(db).glob("run-*"))
            if worker in pids and episodes >= 1:
                os.kill(pids[worker], signal.SIGKILL)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=kill_once_an_episode_is_stored)
    thread.start()
    return thread


def test_a_killed_worker_loses_nothing_its_episodes_are_replayed(tmp_path: Path) -> None:
    db = tmp_path / "killed.duckdb"
    pids: dict[str, int] = {}
    runners: list[RecordingRunner] = []

    def on_ray(catalog: Catalog, store: Store) -> Runner:
        slow = scripted_factory(slow_echo)
        runners.append(RecordingRunner(catalog, store, slow, cluster=TWO_WORKERS, on_worker=pids.__setitem__))
        return runners[-1]

    killing = killer(db, pids, "w1")
    stored = scripted_run(db, "clembench", runner=on_ray)
    killing.join()
    (summary,) = runners[0].summaries
    assert summary.lost_workers == ["w1"]
    # each worker was handed half; w2 played more than its half: what w1 held unfinished was replayed
    assert summary.workers["w2"] > len(stored["episodes"]) // 2, summary.workers
    assert summary.workers["w1"] + summary.workers["w2"] == len(stored["episodes"])
    assert _as_rows(stored) == golden("clembench")


def judges_apart(catalog: Catalog) -> Catalog:
    """The catalog with Gemma (a player and a judge of the default panel) hosted by worker group 'judges'."""
    gemma = catalog.models["gemma3-270m"].model_copy(update={"worker_group": "judges"})
    return catalog.model_copy(update={"models": {**catalog.models, "gemma3-270m": gemma}})


def test_a_model_in_a_worker_group_serves_every_episode_worker_and_changes_nothing(tmp_path: Path) -> None:
    """Gemma loaded once, on the group's worker; both episode workers send it their requests. Every
    worker runs at the driver's priority (Ray's own default, nice 15, starves them on a busy machine)."""
    runners: list[RecordingRunner] = []
    ready: dict[str, int] = {}  # worker name: its niceness once ready

    def niceness(name: str, pid: int) -> None:
        ready[name] = os.getpriority(os.PRIO_PROCESS, pid)

    def on_ray(catalog: Catalog, store: Store) -> Runner:
        made = RecordingRunner(
            judges_apart(catalog), store, scripted_factory(seed_echo), cluster=TWO_WORKERS, on_worker=niceness
        )
        runners.append(made)
        return made

    stored = scripted_run(tmp_path / "groups.duckdb", "pingpong", runner=on_ray)
    assert _as_rows(stored) == golden("pingpong")
    assert list(ready) == ["judges1", "w1", "w2"], ready
    assert set(ready.values()) == {os.getpriority(os.PRIO_PROCESS, 0)}, ready
    (summary,) = runners[0].summaries
    assert sorted(summary.workers) == ["w1", "w2"] and all(summary.workers.values()), summary.workers
    gemma_messages = sum(row[3] == "gemma3-270m" for row in stored["messages"])
    gemma_judgments = sum(row[2] == "gemma3-270m" for row in stored["judgments"])
    assert gemma_messages > 0 and gemma_judgments > 0  # the group worker played and judged


def test_a_killed_group_worker_is_restarted_and_its_requests_sent_again(tmp_path: Path) -> None:
    db = tmp_path / "group-killed.duckdb"
    pids: dict[str, int] = {}
    runners: list[RecordingRunner] = []

    def on_ray(catalog: Catalog, store: Store) -> Runner:
        slow = scripted_factory(slow_echo)
        made = RecordingRunner(judges_apart(catalog), store, slow, cluster=TWO_WORKERS, on_worker=pids.__setitem__)
        runners.append(made)
        return made

    killing = killer(db, pids, "judges1")
    stored = scripted_run(db, "pingpong", runner=on_ray)
    killing.join()
    with pytest.raises(ProcessLookupError):
        os.kill(pids["judges1"], 0)  # it was killed (Ray started another process in its place)
    (summary,) = runners[0].summaries
    assert summary.lost_workers == [] and summary.episodes_finished == len(stored["episodes"])
    assert _as_rows(stored) == golden("pingpong")


def test_a_worker_that_cannot_load_a_model_fails_the_run_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "broken.duckdb"

    def broken(catalog: Catalog, store: Store) -> Runner:
        gone = {"path": str(tmp_path / "gone.gguf"), "package": None}
        missing = catalog.models["gemma3-270m"].model_copy(update=gone)
        catalog = catalog.model_copy(update={"models": {**catalog.models, "gemma3-270m": missing}})
        return Runner(catalog, store, cluster=TWO_WORKERS)

    with pytest.raises(ApplianceError) as refused:
        scripted_run(db, "pingpong", runner=broken)
    message = str(refused.value)
    assert message.startswith("Ray worker w1: ") and "gone.gguf" in message and "\n" not in message

    def broken_judge(catalog: Catalog, store: Store) -> Runner:
        return broken(judges_apart(catalog), store)

    with pytest.raises(ApplianceError) as refused:
        scripted_run(db, "pingpong", runner=broken_judge)
    message = str(refused.value)
    assert message.startswith("Ray worker judges1: ") and "gone.gguf" in message and "\n" not in message

    def unknown_group(catalog: Catalog, store: Store) -> Runner:
        options = ClusterOptions("local", workers=2, cpus_per_worker=1, group_sizes=(("judge", 2),))
        return Runner(judges_apart(catalog), store, cluster=options)

    with pytest.raises(
        ApplianceError, match=r"--worker-group judge: no model of this run is in that group \(groups: judges\)"
    ):
        scripted_run(db, "pingpong", runner=unknown_group)
    with Store.open(db, read_only=True) as store:
        assert store.query("SELECT count(*) FROM runs") == [(0,)]


def test_a_killed_shard_resumes_on_ray_workers_and_merges_into_the_unsharded_run(tmp_path: Path) -> None:
    """The driver killed inside an episode's store transaction; `--resume` with Ray finishes its shard."""
    first, second, merged = (tmp_path / f"{name}.duckdb" for name in ("first", "second", "merged"))
    killed = run_helper(first, "clembench", "--shard", "1/2", "--kill-in-write", "2")
    killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL
    run_id = run_to_resume(first)
    assert run_id is not None and run_id.startswith("sharded-")
    finish(run_helper(first, "clembench", "--resume", run_id, "--ray", "2"))
    finish(run_helper(second, "clembench", "--shard", "2/2"))
    summary = merge_shards([first, second], merged)
    assert summary.run_id == run_id and all(facts["episodes"] for facts in summary.shards.values())
    with Store.open(merged, read_only=True) as store:
        assert _as_rows(canonical(store, run_id)) == golden("clembench")


def _listeners(pid: int) -> dict[int, str]:
    """Listening TCP sockets of `pid`'s network namespace: socket inode -> local address (hex, as /proc writes it)."""
    found = {}
    for table in ("tcp", "tcp6"):
        for line in (Path(f"/proc/{pid}/net") / table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                found[int(fields[9])] = fields[1]
    return found


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for link in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(link)
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace of its own needs root (docs/scale-out.md)")
def test_a_local_cluster_listens_on_the_loopback_only(tmp_path: Path) -> None:
    """Every Ray process of a local cluster sits in a network namespace whose only interface is the
    loopback, and none of their listening sockets is in the host's namespace."""
    seen: dict[str, tuple[str, list[str], dict[int, str], set[int]]] = {}

    def inspect(name: str, pid: int) -> None:
        namespace = os.readlink(f"/proc/{pid}/ns/net")
        processes = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _same_network(int(p.name), namespace)]
        inodes = set().union(*(_socket_inodes(int(p.name)) for p in processes))
        seen[name] = (namespace, _interfaces(pid), _listeners(pid), inodes)

    def on_ray(catalog: Catalog, store: Store) -> Runner:
        return Runner(catalog, store, scripted_factory(seed_echo), cluster=TWO_WORKERS, on_worker=inspect)

    host_namespace = os.readlink("/proc/thread-self/ns/net")
    scripted_run(tmp_path / "ray.duckdb", "clembench", runner=on_ray)
    # the cluster shut down, this thread is back on the host's network (its later connections are the host's)
    assert os.readlink("/proc/thread-self/ns/net") == host_namespace
    host_listeners = _listeners(os.getpid())
    assert sorted(seen) == ["w1", "w2"]
    for name, (namespace, names, listeners, inodes) in seen.items():
        assert namespace != host_namespace and names == ["lo"], (name, names)
        assert listeners, "the cluster's servers listen (in their own namespace)"
        assert not inodes & set(host_listeners), f"{name}: a Ray socket listens on the host's network"


def _same_network(pid: int, namespace: str) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/net") == namespace
    except OSError:
        return False


def _interfaces(pid: int) -> list[str]:
    """The interfaces of `pid`'s network namespace (the names before the colons of /proc/PID/net/dev)."""
    lines = (Path(f"/proc/{pid}/net/dev")).read_text().splitlines()[2:]
    return [re.match(r"\s*([^\s:]+)", line).group(1) for line in lines]  # type: ignore[union-attr]
