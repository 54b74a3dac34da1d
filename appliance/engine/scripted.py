"""A backend that answers from a Python function: for unit tests of rules and parsing.

It follows the same submit/step protocol as the real backends (one step
finishes every queued request), so scheduler and episode code run unchanged.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from appliance.engine.backend import BackendBase, cut_at_stop
from appliance.engine.types import Completion, GenerationRequest, TokenScores

Responder = Callable[[GenerationRequest], str]
Scorer = Callable[[GenerationRequest], TokenScores]


class ScriptedBackend(BackendBase):
    def __init__(
        self, name: str, respond: Responder, context_chars: int | None = None, scorer: Scorer | None = None
    ) -> None:
        """`context_chars`: a context measured in characters (one per token), to test overflow handling.
        `scorer`: answers scoring requests (default `scripted_scores`)."""
        super().__init__(name)
        self.respond = respond
        self.scorer = scorer or scripted_scores
        self.context_chars = context_chars
        self.requests: list[GenerationRequest] = []
        self._queue: list[tuple[int, GenerationRequest]] = []

    def submit(self, request: GenerationRequest) -> int:
        ticket = self._ticket()
        self._queue.append((ticket, request))
        self.requests.append(request)
        return ticket

    @property
    def busy(self) -> bool:
        return bool(self._queue)

    def step(self) -> list[tuple[int, Completion]]:
        batch, self._queue = self._queue, []
        self.counters.decode_calls += 1
        return [(ticket, self._complete(request)) for ticket, request in batch]

    def _complete(self, request: GenerationRequest) -> Completion:
        size = sum(len(message.content) for message in request.messages) + len(request.prompt or "")
        refusal = None if self.context_chars is None else self._refusal(request, size, self.context_chars)
        if refusal is not None:
            return refusal
        if request.scoring is not None:
            return Completion(
                text="",
                finish_reason="stop",
                prompt_tokens=size,
                completion_tokens=0,
                latency_s=0.0,
                scores=self.scorer(request),
            )
        text = cut_at_stop(self.respond(request), request.sampling.stop)
        return Completion(text=text, finish_reason="stop", prompt_tokens=size, completion_tokens=1, latency_s=0.0)

    def count_tokens(self, text: str) -> int:
        """One token per character, as the scripted context is measured."""
        return len(text)

    def close(self) -> None:
        self._queue.clear()


def scripted_scores(request: GenerationRequest) -> TokenScores:
    """Log-probabilities that depend only on the text (a word is a token): stable, and not constant."""
    assert request.scoring is not None
    prompt = request.prompt or "".join(message.content for message in request.messages)

    def logprob(text: str) -> float:
        return -1.0 - (zlib.crc32(text.encode()) % 400) / 100.0

    words = request.scoring.continuation.split()
    return TokenScores(
        token_logprobs=tuple(logprob(f"{prompt}|{index}|{word}") for index, word in enumerate(words)),
        choice_logprobs=tuple(logprob(f"{prompt}|{choice}") for choice in request.scoring.choices),
    )
