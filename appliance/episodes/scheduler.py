"""The scheduler: turns the awaits of many live episodes into batched backend steps.

Episodes call `generate` and await; the request is queued on its model's
backend at once. The drive loop lets every runnable episode advance until it
blocks again, then steps each busy backend once (one batched decode), and
resolves the futures of the requests that finished. A finished request frees
its slot and the next queued one joins the next step: continuous batching.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any

from appliance.engine.backend import Backend, distinct_backends
from appliance.engine.types import Completion, GenerationRequest
from appliance.errors import ApplianceError

_MAX_SETTLE_ROUNDS = 64


class Scheduler:
    """`backends` by model name (a base and its adapters may share one); `adapters`: the names that are
    adapters on a shared backend, whose requests carry that name so the backend picks the adapter."""

    def __init__(self, backends: Mapping[str, Backend], *, adapters: Iterable[str] = ()) -> None:
        self.backends = dict(backends)
        self.adapters = frozenset(adapters)
        self._stepped = distinct_backends(self.backends.values())
        self._pending: dict[tuple[int, int], asyncio.Future[Completion]] = {}  # (id of backend, ticket)
        self._submitted = 0

    def _backend(self, model: str) -> Backend:
        backend = self.backends.get(model)
        if backend is None:
            raise ApplianceError(f"model '{model}' is not loaded in this run")
        return backend

    def count_tokens(self, model: str, text: str) -> int:
        """`text`'s length in `model`'s tokens."""
        return self._backend(model).count_tokens(text)

    def generate(self, model: str, request: GenerationRequest) -> Awaitable[Completion]:
        """Queue `request` on `model` now; the returned future resolves when it finishes."""
        backend = self._backend(model)
        if model in self.adapters:
            request = request.model_copy(update={"adapter": model})
        future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        ticket = backend.submit(request)
        self._pending[(id(backend), ticket)] = future
        self._submitted += 1
        return future

    async def _settle(self) -> None:
        """Yield until no episode submits anything more (all are blocked on the engine)."""
        last = -1
        rounds = 0
        while last != self._submitted and rounds < _MAX_SETTLE_ROUNDS:
            last = self._submitted
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            rounds += 1

    async def drive(self, work: asyncio.Future[Any]) -> None:
        """Step the backends until `work` (usually a gather of episodes) is done."""
        while not work.done():
            await self._settle()
            stepped = False
            for backend in self._stepped:
                if not backend.busy:
                    continue
                stepped = True
                for ticket, completion in backend.step():
                    future = self._pending.pop((id(backend), ticket))
                    if not future.cancelled():
                        future.set_result(completion)
            if not stepped:
                # Nothing queued: episodes are between awaits (or finishing); let them run.
                await asyncio.sleep(0.001 if not work.done() else 0)
