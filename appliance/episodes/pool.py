"""The model pool: the models a job needs, loaded once, and one scheduler that batches them.

Runs, rescoring, calibration and the bench all work the same way: open the backends (a failed load
closes those already open), play many pieces of work at once, each under a limit on how many are
live and all through one scheduler so that their requests share decode steps, hand each result on
as it finishes, and close the backends at the end or on an interrupt. That lifecycle is written
here once. The pool knows nothing of the store or the CLI, so a remote worker can hold one.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Generic, TypeVar

from appliance.catalog.models import Catalog
from appliance.engine.backend import Backend, BackendCounters, distinct_backends
from appliance.engine.factory import adapter_hosts, open_adapter_host, open_backend
from appliance.episodes.roles import BackendFactory
from appliance.episodes.scheduler import Scheduler

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")
#: one piece of work: an item played through the scheduler of the `play` in progress (its clients and
#: episode contexts are built on it)
Work = Callable[[ItemT, Scheduler], Awaitable[ResultT]]
#: what `play` does with each result as it comes: store it, say, and hand back any work it opens
OnResult = Callable[[ItemT, ResultT], Iterable[ItemT] | None]


class ModelPool:
    """Backends by model name, the concurrency limit, and `play`; use it as a context manager.

    Several names may share one backend: a base and its adapters on a backend that hosts adapters.
    `adapters` names the entries that are adapters on such a shared backend.
    """

    def __init__(self, backends: Mapping[str, Backend], *, parallel: int, adapters: Iterable[str] = ()) -> None:
        self.backends = dict(backends)
        self.parallel = parallel
        self.adapters = frozenset(adapters)

    @classmethod
    def load(
        cls,
        catalog: Catalog,
        names: Iterable[str],
        *,
        parallel: int,
        backend_factory: BackendFactory = open_backend,
    ) -> ModelPool:
        """Open every named model (once each, in order); a model that fails to load closes the others.

        The adapter entries of one base whose backend hosts adapters share one backend, opened for the
        base with all of them (`open_adapter_host`, whatever the factory); the base's own name maps to
        it too when the job uses the base."""
        names = list(dict.fromkeys(names))
        hosted = adapter_hosts(catalog, names)
        hosted_names = {spec.name for specs in hosted.values() for spec in specs}
        backends: dict[str, Backend] = {}
        try:
            for name in names:
                spec = catalog.get(name)
                host = spec.base if name in hosted_names else name if name in hosted else None
                if host is None:
                    backends[name] = backend_factory(catalog, spec, parallel=parallel)
                    continue
                if host not in backends:
                    backends[host] = open_adapter_host(catalog, catalog.get(host), hosted[host], parallel=parallel)
                backends[name] = backends[host]
            backends = {name: backends[name] for name in names}  # a base opened only as a host serves no one
        except BaseException:
            for backend in distinct_backends(backends.values()):
                backend.close()
            raise
        return cls(backends, parallel=parallel, adapters=hosted_names)

    def play(
        self,
        items: Sequence[ItemT],
        work: Work[ItemT, ResultT],
        on_result: OnResult[ItemT, ResultT] | None = None,
    ) -> list[ResultT]:
        """`work(item, scheduler)` for every item, at most `parallel` live at once, all batched by one
        scheduler; `on_result` runs as each finishes (a store write, say) and may return more items
        (a staged family's next stage). Those go before every item not yet started, so that work
        which waits on other work is not left for the end. Results come back in the order the items
        were given, then those opened, in the order they were opened."""

        async def play_all() -> list[ResultT]:
            scheduler = self.scheduler()
            waiting: deque[tuple[int, ItemT]] = deque(enumerate(items))
            opened = len(waiting)
            results: dict[int, ResultT] = {}
            live: set[asyncio.Task[None]] = set()
            settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def start() -> None:
                while waiting and len(live) < self.parallel:
                    task = asyncio.ensure_future(one(*waiting.popleft()))
                    live.add(task)
                    task.add_done_callback(finished)
                if not live and not settled.done():
                    settled.set_result(None)

            def finished(task: asyncio.Task[None]) -> None:
                live.discard(task)
                error = None if task.cancelled() else task.exception()
                if settled.done():
                    return
                if error is not None:
                    settled.set_exception(error)
                else:
                    start()

            async def one(number: int, item: ItemT) -> None:
                nonlocal opened
                results[number] = await work(item, scheduler)
                more = list(on_result(item, results[number]) or ()) if on_result is not None else []
                waiting.extendleft(reversed(list(enumerate(more, start=opened))))
                opened += len(more)

            start()
            await scheduler.drive(settled)
            settled.result()
            return [results[number] for number in range(opened)]

        return asyncio.run(play_all())

    def scheduler(self) -> Scheduler:
        """A scheduler over the pool's backends (one per `play` or `serve`)."""
        return Scheduler(self.backends, adapters=self.adapters)

    def serve(self, work: Work[ItemT, ResultT]) -> Serving[ItemT, ResultT]:
        """`work` for items handed in one by one, from any thread, while others play (a remote
        worker's calls): as `play`, but open-ended. Close the returned `Serving` before the pool."""
        return Serving(self, work)

    def counters(self) -> list[BackendCounters]:
        return [backend.counters for backend in distinct_backends(self.backends.values())]

    def close(self) -> None:
        for backend in distinct_backends(self.backends.values()):
            backend.close()
        self.backends.clear()

    def __enter__(self) -> ModelPool:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


class Serving(Generic[ItemT, ResultT]):
    """A pool's scheduler driven on a thread of its own until closed; `submit` hands it an item."""

    def __init__(self, pool: ModelPool, work: Work[ItemT, ResultT]) -> None:
        self._work = work
        self._loop = asyncio.new_event_loop()
        self._scheduler = pool.scheduler()
        self._limiter = asyncio.Semaphore(pool.parallel)
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._drive(),), daemon=True)
        self._thread.start()

    def _finish(self) -> None:
        if not self._closed.done():
            self._closed.set_result(None)

    async def _drive(self) -> None:
        await self._scheduler.drive(self._closed)
        abandoned = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in abandoned:
            task.cancel()
        await asyncio.gather(*abandoned, return_exceptions=True)

    async def _one(self, item: ItemT) -> ResultT:
        async with self._limiter:
            return await self._work(item, self._scheduler)

    def submit(self, item: ItemT) -> Future[ResultT]:
        """Play `item`; the future holds its result (or the exception its work raised)."""
        return asyncio.run_coroutine_threadsafe(self._one(item), self._loop)

    def close(self) -> None:
        """Stop driving (work still live is abandoned) and wait for the thread."""
        if not self._thread.is_alive():
            return
        self._loop.call_soon_threadsafe(self._finish)
        self._thread.join()
        self._loop.close()
