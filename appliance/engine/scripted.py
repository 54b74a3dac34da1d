"""A backend that answers from a Python function: for unit tests of rules and parsing.

It follows the same submit/step protocol as the real backends (one step
finishes every queued request), so scheduler and episode code run unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from appliance.engine.backend import BackendCounters
from appliance.engine.types import Completion, GenerationRequest

Responder = Callable[[GenerationRequest], str]


class ScriptedBackend:
    def __init__(self, name: str, respond: Responder) -> None:
        self.name = name
        self.respond = respond
        self.counters = BackendCounters()
        self.requests: list[GenerationRequest] = []
        self._queue: list[tuple[int, GenerationRequest]] = []
        self._next_ticket = 0

    def submit(self, request: GenerationRequest) -> int:
        ticket = self._next_ticket
        self._next_ticket += 1
        self._queue.append((ticket, request))
        self.requests.append(request)
        self.counters.requests += 1
        return ticket

    @property
    def busy(self) -> bool:
        return bool(self._queue)

    def step(self) -> list[tuple[int, Completion]]:
        batch, self._queue = self._queue, []
        self.counters.decode_calls += 1
        return [
            (
                ticket,
                Completion(
                    text=self.respond(request),
                    finish_reason="stop",
                    prompt_tokens=0,
                    completion_tokens=1,
                    latency_s=0.0,
                ),
            )
            for ticket, request in batch
        ]

    def close(self) -> None:
        self._queue.clear()
