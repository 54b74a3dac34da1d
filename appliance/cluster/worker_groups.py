"""Worker groups (`appliance run --ray` with `worker_group` in models.toml): a model hosted apart.

By default every episode worker holds every model of the run. A model whose catalog entry names a
`worker_group` (a judge too large to load on every worker, or one that needs several GPUs) is loaded
once per worker of that group instead, and every episode worker reaches it through a
`RemoteBackend`: the scheduler steps it like any backend, and its requests travel to the group's
`ModelServer`, which batches the requests of all episode workers with continuous batching. Episode
worker i uses the group's worker i mod (its size), so one worker's conversations meet their cached
prefixes on the same server.

Where a request is played does not change it: its seed is in the request, and exact KV makes a
text independent of what shares the batch. A group worker that dies is restarted by Ray with its
models, and the requests it held are sent again (same seeds, same answers).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from appliance.catalog.models import Catalog
from appliance.engine.backend import BackendBase, BackendCounters
from appliance.engine.types import Completion, GenerationRequest
from appliance.episodes.pool import ModelPool, Serving
from appliance.episodes.roles import BackendFactory
from appliance.episodes.scheduler import Scheduler
from appliance.errors import ApplianceError
from appliance.offline import enforce_offline

#: how long a remote backend's step waits for its first finished request (the scheduler steps it in a loop)
_STEP_WAIT_S = 0.002
#: how often Ray restarts a group worker that died, and sends again the requests it held
GROUP_WORKER_RESTARTS = 3


@dataclass(frozen=True)
class WorkerGroup:
    """The workers that host `models`: `size` of them, each with `gpus` GPUs."""

    name: str
    models: tuple[str, ...]
    size: int
    gpus: float

    def worker_names(self) -> list[str]:
        return [f"{self.name}{index}" for index in range(1, self.size + 1)]


def parse_group_sizes(values: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """`--worker-group NAME=COUNT` values; anything else is one line naming the value."""
    sizes: dict[str, int] = {}
    for value in values:
        name, _, count = value.partition("=")
        if not name or not count.isdigit() or int(count) < 1:
            raise ApplianceError(
                f"--worker-group {value}: expected NAME=COUNT (a group named in models.toml, 1 or more)"
            )
        sizes[name] = int(count)
    return tuple(sizes.items())


def plan_groups(
    catalog: Catalog, models: Sequence[str], sizes: Mapping[str, int], gpus_per_worker: float
) -> list[WorkerGroup]:
    """The groups that the run's `models` name, in the catalog's order. A group worker has as many GPUs
    as its largest vLLM model splits over (tensor x pipeline), at least `gpus_per_worker`, and none when
    the episode workers have none. A size given for a group no model of the run names is refused."""
    grouped: dict[str, list[str]] = {}
    for name in models:
        group = catalog.get(name).worker_group
        if group is not None:
            grouped.setdefault(group, []).append(name)
    for name in sizes:
        if name not in grouped:
            known = ", ".join(grouped) or "none"
            raise ApplianceError(f"--worker-group {name}: no model of this run is in that group (groups: {known})")
    groups = []
    for group, names in grouped.items():
        splits = [catalog.get(n).options.gpus() for n in names]
        gpus = max(gpus_per_worker, *splits) if gpus_per_worker else 0.0
        groups.append(WorkerGroup(group, tuple(names), sizes.get(group, 1), float(gpus)))
    return groups


def with_threads(catalog: Catalog, threads: int) -> Catalog:
    """Models that leave their thread count to the machine use the worker's CPUs instead of all of them."""
    models = {
        name: spec.with_options(threads=threads)
        if spec.reads("threads") and getattr(spec.options, "threads", None) is None
        else spec
        for name, spec in catalog.models.items()
    }
    return catalog.model_copy(update={"models": models})


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ApplianceError("--ray needs Ray: pip install -e '.[ray]'") from None
    return ray


def _generate(item: tuple[str, GenerationRequest], scheduler: Scheduler) -> asyncio.Future[Completion]:
    model, request = item
    return scheduler.generate(model, request)  # type: ignore[return-value]


class ModelServer:
    """One worker of a group: its models, serving every episode worker's requests (a Ray actor)."""

    def __init__(
        self, name: str, catalog: Catalog, models: list[str], live: int, backend_factory: BackendFactory, threads: int
    ) -> None:
        enforce_offline()
        try:
            self.pool = ModelPool.load(
                with_threads(catalog, threads), models, parallel=live, backend_factory=backend_factory
            )
        except ApplianceError as error:
            raise ApplianceError(f"Ray worker {name}: {error}") from None
        self.serving: Serving[tuple[str, GenerationRequest], Completion] = self.pool.serve(_generate)

    def pid(self) -> int:
        return os.getpid()

    async def generate(self, model: str, request: GenerationRequest) -> Completion:
        return await asyncio.wrap_future(self.serving.submit((model, request)))

    def count_tokens(self, model: str, text: str) -> int:
        return self.pool.backends[model].count_tokens(text)

    def counters(self) -> list[BackendCounters]:
        return self.pool.counters()

    def close(self) -> None:
        self.serving.close()
        self.pool.close()


class RemoteBackend(BackendBase):
    """A model that a group worker hosts, as a backend of an episode worker's scheduler. Its token
    counters stay empty: the tokens are counted where they are computed, in the group worker."""

    def __init__(self, name: str, server: Any) -> None:
        super().__init__(name)
        self._server = server
        self._pending: dict[Any, int] = {}  # Ray object ref -> ticket

    def _queue(self, ticket: int, request: GenerationRequest) -> None:
        self._pending[self._server.generate.remote(self.name, request)] = ticket

    def _step(self) -> list[tuple[int, Completion]]:
        """The requests that came back: waits a little for the first, then takes all that are ready."""
        ray = import_ray()
        ready, rest = ray.wait(list(self._pending), num_returns=1, timeout=_STEP_WAIT_S)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        return [(self._pending.pop(ref), ray.get(ref)) for ref in ready]

    def _counted(self, completion: Completion) -> Completion:
        """Counted where it was computed, in the group worker: not again here."""
        return completion

    @property
    def busy(self) -> bool:
        return bool(self._pending)

    def count_tokens(self, text: str) -> int:
        return int(import_ray().get(self._server.count_tokens.remote(self.name, text)))

    def _close(self) -> None:
        """Nothing to free here but the answers still awaited: the group worker is closed by the cluster."""
        self._pending.clear()
