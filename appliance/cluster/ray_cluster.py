"""Episodes over a Ray cluster (`appliance run --ray`): the driver plans and stores, workers play.

Each worker is a Ray actor that holds one model pool (every model the run needs, loaded once) and
plays the episodes it is handed with continuous batching, as the single process does
(`ModelPool.serve`). The driver hands each worker a window of episodes, collects finished records
as they come (`take`), and alone writes the store, one transaction per episode. Where an episode is
played does not change it: request seeds derive from the episode's identity, and exact KV makes
each text independent of what shares the batch.

A worker that dies (its process killed, its node lost) loses only the episodes it held unfinished;
they go back to the queue and another worker plays them with the same seeds. A worker that cannot
load a model fails the run in one line naming the worker and the model, before anything is stored.

Ray is the one mode that opens sockets (its processes talk over the loopback on one machine, over
the cluster's network across machines). Usage reporting and the dashboard are off by configuration.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import sys
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType
from typing import Any

from appliance.catalog.models import Catalog
from appliance.cluster.loopback import LoopbackNetwork
from appliance.cluster.worker_groups import (
    GROUP_WORKER_RESTARTS,
    ModelServer,
    RemoteBackend,
    WorkerGroup,
    import_ray,
    plan_groups,
    with_threads,
)
from appliance.engine.backend import BackendCounters
from appliance.episodes.context import EpisodeKey
from appliance.episodes.pool import ModelPool, Serving
from appliance.episodes.roles import BackendFactory
from appliance.errors import ApplianceError
from appliance.offline import enforce_offline
from appliance.run.playing import EpisodePlayer, OnPlayed, PlannedEpisode
from appliance.scenarios.base import Instance, ScenarioFamily
from appliance.store import EpisodeRecord

#: set for the driver and every worker before Ray starts: no usage statistics, no dashboard, and
#: workers at the driver's priority: Ray's default (nice 15) lets any other busy process on a shared
#: machine take nearly all of a worker's core, and a nightly run then crawls (3% of a core, measured)
RAY_ENVIRONMENT = {
    "RAY_worker_niceness": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_PROMPT_ENABLED": "0",
    "RAY_DISABLE_DOCKER_CPU_WARNING": "1",
    "RAY_DEDUP_LOGS": "0",
}
_ADDRESS = re.compile(r"local|auto|[A-Za-z0-9.-]+:\d{1,5}")
#: how long a worker's `take` waits for a finished episode before it answers with none
_TAKE_WAIT_S = 0.5


@dataclass(frozen=True)
class ClusterOptions:
    """Where and how wide: `address` is "local" (a cluster of this machine, started and stopped
    with the run), "auto" (the cluster this machine belongs to) or HOST:PORT."""

    address: str = "local"
    workers: int = 2
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    #: workers per worker group (`worker_group` in models.toml); a group not named here has one
    group_sizes: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if _ADDRESS.fullmatch(self.address) is None:
            raise ApplianceError(f"--ray {self.address}: expected local, auto or HOST:PORT")

    def describe(self) -> str:
        gpus = f", {self.gpus_per_worker:g} GPU" if self.gpus_per_worker else ""
        groups = "".join(f", group {name} x {size}" for name, size in self.group_sizes)
        return f"ray {self.address}: {self.workers} workers x {self.cpus_per_worker:g} CPU{gpus}{groups}"

    def players(
        self,
        catalog: Catalog,
        models: list[str],
        player: EpisodePlayer,
        backend_factory: BackendFactory,
        on_worker: Callable[[str, int], None] | None,
    ) -> RayCluster:
        """The runner's `Cluster`: connect to (or start) the cluster, every worker's models loaded."""
        return RayCluster.start(self, catalog, models, player, backend_factory, on_worker)


@dataclass(frozen=True)
class ShippedEpisode:
    """A planned episode as it travels: its family by index into the phase's families (sent once)."""

    family: int
    key: EpisodeKey
    instance: Instance
    player: str
    seed: int
    partner: str
    table: tuple[str, ...]


class EpisodeWorker:
    """One worker's model pool and the episodes it is playing; a Ray actor in a cluster run. `hosted`:
    the models a group worker holds for it (model name -> that worker's actor)."""

    def __init__(
        self,
        name: str,
        catalog: Catalog,
        models: list[str],
        player: EpisodePlayer,
        backend_factory: BackendFactory,
        threads: int,
        hosted: dict[str, Any],
    ) -> None:
        enforce_offline()
        self.name = name
        try:
            local = ModelPool.load(
                with_threads(catalog, threads), models, parallel=player.config.parallel, backend_factory=backend_factory
            )
        except ApplianceError as error:
            raise ApplianceError(f"Ray worker {name}: {error}") from None
        remote = {model: RemoteBackend(model, server) for model, server in hosted.items()}
        self.pool = ModelPool({**local.backends, **remote}, parallel=local.parallel, adapters=local.adapters)
        self.player = player
        self.families: list[ScenarioFamily] = []
        self.serving: Serving[PlannedEpisode, EpisodeRecord | None] = self.pool.serve(player.play)
        self.finished: queue.Queue[tuple[str, EpisodeRecord | None]] = queue.Queue()

    def pid(self) -> int:
        return os.getpid()

    def know(self, families: list[ScenarioFamily]) -> None:
        """More families (stages) of the episodes to come, prepared by the driver; an episode names
        its family by its place in all those known so far."""
        self.families += families

    def play(self, episodes: list[ShippedEpisode]) -> None:
        for shipped in episodes:
            planned = PlannedEpisode(
                shipped.key,
                self.families[shipped.family],
                shipped.instance,
                shipped.player,
                shipped.seed,
                shipped.partner,
                shipped.table,
            )
            self.serving.submit(planned).add_done_callback(partial(self._finished, planned.episode_id))

    def _finished(self, episode_id: str, done: Future[EpisodeRecord | None]) -> None:
        if not done.cancelled():
            self.finished.put((episode_id, done.result()))

    def take(self, wait_s: float = _TAKE_WAIT_S) -> list[tuple[str, EpisodeRecord | None]]:
        """Finished episodes since the last take: waits up to `wait_s` for the first."""
        try:
            taken = [self.finished.get(timeout=wait_s)]
        except queue.Empty:
            return []
        while True:
            try:
                taken.append(self.finished.get_nowait())
            except queue.Empty:
                return taken

    def counters(self) -> list[BackendCounters]:
        return self.pool.counters()

    def close(self) -> None:
        self.serving.close()
        self.pool.close()


@dataclass
class _Worker:
    name: str
    actor: Any
    pid: int
    #: episodes handed to it and not yet back, by id
    holding: dict[str, PlannedEpisode] = field(default_factory=dict)
    played: int = 0


class RayCluster:
    """The workers of one run; `play` keeps the model pool's contract for the runner."""

    def __init__(
        self,
        options: ClusterOptions,
        workers: list[_Worker],
        started_ray: bool,
        player: EpisodePlayer,
        group_workers: list[_Worker] | None = None,
        network: LoopbackNetwork | None = None,
    ) -> None:
        self.options = options
        #: the loopback-only network namespace its Ray processes were started in, left at `close`
        self._network = network or LoopbackNetwork()
        self.workers = workers
        self._all = list(workers)
        self.group_workers = group_workers or []
        self._started_ray = started_ray
        self._window = 2 * player.config.parallel
        self._stop = player.stop
        #: worker name -> why it left the run (a lost worker's episodes were replayed elsewhere)
        self._lost: dict[str, str] = {}
        self._counters: list[BackendCounters] = []
        #: a family (stage) -> its place in the list every worker knows (`EpisodeWorker.know`)
        self._known: dict[int, int] = {}

    @classmethod
    def start(
        cls,
        options: ClusterOptions,
        catalog: Catalog,
        models: list[str],
        player: EpisodePlayer,
        backend_factory: BackendFactory,
        on_worker: Callable[[str, int], None] | None = None,
    ) -> RayCluster:
        """Connect to (or start) the cluster and start every worker with its models loaded: the
        worker groups' first, then the episode workers, which hold every model no group hosts."""
        ray = import_ray()
        groups = plan_groups(catalog, models, dict(options.group_sizes), options.gpus_per_worker)
        started_ray = not ray.is_initialized()
        network = LoopbackNetwork()
        if started_ray:
            if options.address == "local":
                _keep_to_the_loopback(network)
            ray.init(**_init_arguments(options, groups))
        threads = max(1, int(options.cpus_per_worker))
        started: list[Any] = []
        ready: list[_Worker] = []
        try:
            live = options.workers * player.config.parallel  # a group worker serves every episode worker
            servers: list[tuple[WorkerGroup, list[Any]]] = []
            for group in groups:
                actors = [
                    _group_worker(ray, options, group).remote(
                        name, catalog, list(group.models), live, backend_factory, threads
                    )
                    for name in group.worker_names()
                ]
                started += actors
                servers.append((group, actors))
            remote = ray.remote(EpisodeWorker).options(
                num_cpus=options.cpus_per_worker,
                num_gpus=options.gpus_per_worker,
                max_concurrency=4,
                max_restarts=0,
            )
            hosted = {model for group in groups for model in group.models}
            local = [model for model in models if model not in hosted]
            names = [f"w{index}" for index in range(1, options.workers + 1)]
            for index, name in enumerate(names):
                reach = {model: held[index % len(held)] for group, held in servers for model in group.models}
                started.append(remote.remote(name, catalog, local, player, backend_factory, threads, reach))
            group_names = [name for group, _ in servers for name in group.worker_names()]
            for name, actor in zip(group_names + names, started, strict=True):
                ready.append(_Worker(name, actor, _ready(ray, actor)))
                if on_worker is not None:
                    on_worker(name, ready[-1].pid)
        except BaseException:
            for actor in started:
                ray.kill(actor)
            if started_ray:
                ray.shutdown()
            network.leave()
            raise
        return cls(options, ready[len(group_names) :], started_ray, player, ready[: len(group_names)], network)

    def play(self, episodes: Sequence[PlannedEpisode], on_result: OnPlayed) -> list[EpisodeRecord | None]:
        """Every episode played on some worker; `on_result` runs in the driver as each comes back.
        Episodes of a worker that dies are handed to the others; once a stop is asked, no more are
        handed out."""
        ray = import_ray()
        index = self._known

        def make_known(more: Sequence[PlannedEpisode]) -> None:
            families = list({id(e.family): e.family for e in more if id(e.family) not in index}.values())
            if families:
                index.update((id(family), len(index) + place) for place, family in enumerate(families))
                ray.get([worker.actor.know.remote(families) for worker in self.workers])

        make_known(episodes)
        waiting = deque(episodes)
        results: list[EpisodeRecord | None] = []
        polls: dict[Any, _Worker] = {}

        def hand_out(worker: _Worker, most: int = self._window) -> None:
            batch: list[PlannedEpisode] = []
            while waiting and not self._stop.requested and len(worker.holding) + len(batch) < most:
                batch.append(waiting.popleft())
            if batch:
                worker.holding.update((e.episode_id, e) for e in batch)
                worker.actor.play.remote([_shipped(e, index[id(e.family)]) for e in batch])
            if worker.holding and worker not in polls.values():
                polls[worker.actor.take.remote()] = worker

        share = -(-len(waiting) // len(self.workers))  # at first an even share each, then topped up
        for worker in self.workers:
            hand_out(worker, min(share, self._window))
        while polls:
            ready, _ = ray.wait(list(polls), num_returns=1)
            worker = polls.pop(ready[0])
            try:
                taken = ray.get(ready[0])
            except ray.exceptions.RayActorError as error:
                self._lose(worker, error, waiting)
                for other in self.workers:
                    hand_out(other)
                continue
            opened: list[PlannedEpisode] = []
            for episode_id, record in taken:
                planned = worker.holding.pop(episode_id)
                worker.played += record is not None
                opened += on_result(planned, record) or ()
                results.append(record)
            make_known(opened)
            waiting.extendleft(reversed(opened))  # as in one process: before episodes not yet started
            hand_out(worker)
            if opened:
                for other in self.workers:
                    hand_out(other)
        return results

    def _lose(self, worker: _Worker, error: Exception, waiting: deque[PlannedEpisode]) -> None:
        """A dead worker's unfinished episodes go back to the front of the queue."""
        self.workers.remove(worker)
        self._lost[worker.name] = type(error).__name__
        waiting.extendleft(reversed(list(worker.holding.values())))
        worker.holding.clear()
        if not self.workers:
            raise ApplianceError(f"every Ray worker was lost (the last, {worker.name}: {type(error).__name__})")

    def counters(self) -> list[BackendCounters]:
        """Every live worker's backend counters, the groups' included (a lost worker's died with it)."""
        ray = import_ray()
        live = self.group_workers + self.workers
        return self._counters or [c for w in live for c in ray.get(w.actor.counters.remote())]

    def played(self) -> dict[str, int]:
        """Episodes each worker played, lost workers included."""
        return {worker.name: worker.played for worker in self._all}

    def lost(self) -> list[str]:
        return list(self._lost)

    def close(self) -> None:
        ray = import_ray()
        if self.workers and not self._counters:
            self._counters = self.counters()
        for worker in self.workers + self.group_workers:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(worker.actor.close.remote())
            ray.kill(worker.actor)
        if self._started_ray:
            ray.shutdown()
        self._network.leave()

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def _group_worker(ray: Any, options: ClusterOptions, group: WorkerGroup) -> Any:
    """The Ray actor class of a group's workers: restarted when they die, their requests sent again."""
    return ray.remote(ModelServer).options(
        num_cpus=options.cpus_per_worker,
        num_gpus=group.gpus,
        max_restarts=GROUP_WORKER_RESTARTS,
        max_task_retries=GROUP_WORKER_RESTARTS,
    )


def _shipped(planned: PlannedEpisode, family: int) -> ShippedEpisode:
    return ShippedEpisode(
        family, planned.key, planned.instance, planned.player, planned.seed, planned.partner, planned.table
    )


def _ready(ray: Any, actor: Any) -> int:
    """The worker's pid once its models are loaded; a model that failed to load is one line."""
    try:
        return int(ray.get(actor.pid.remote()))
    except ray.exceptions.RayActorError as error:
        cause = getattr(error, "cause", None) or error
        inner = getattr(cause, "cause", None)
        if isinstance(inner, ApplianceError):
            raise inner from None
        text = str(cause).strip().splitlines()
        reason = next((line for line in reversed(text) if "ApplianceError:" in line), text[-1] if text else "")
        raise ApplianceError(reason.split("ApplianceError: ", 1)[-1]) from None


def _keep_to_the_loopback(network: LoopbackNetwork) -> None:
    """A local cluster's servers listen on every interface; in a network namespace of their own every
    interface is the loopback (appliance/cluster/loopback.py). Where that cannot be had, stderr says so."""
    problem = network.enter()
    if problem is not None:
        print(f"warning: the local Ray cluster listens on the host's network ({problem})", file=sys.stderr)


def _init_arguments(options: ClusterOptions, groups: list[WorkerGroup]) -> dict[str, Any]:
    for name, value in RAY_ENVIRONMENT.items():
        os.environ[name] = value
    arguments: dict[str, Any] = {"include_dashboard": False, "logging_level": "warning", "log_to_driver": False}
    if options.address == "local":  # the cluster's processes inherit this environment
        group_workers = sum(group.size for group in groups)
        arguments["num_cpus"] = max(1, round((options.workers + group_workers) * options.cpus_per_worker))
        arguments["num_gpus"] = options.workers * options.gpus_per_worker + sum(g.size * g.gpus for g in groups)
    else:  # workers on other machines get it with the job
        arguments["address"] = options.address
        arguments["runtime_env"] = {"env_vars": dict(RAY_ENVIRONMENT)}
    return arguments
