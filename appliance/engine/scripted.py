"""A backend that answers from a Python function: for unit tests of rules and parsing.

It follows the same submit/step protocol as the real backends (one step
finishes every queued request), so scheduler and episode code run unchanged.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from appliance.engine.backend import BackendBase
from appliance.engine.types import Completion, FinishReason, GenerationRequest, TokenScores

Responder = Callable[[GenerationRequest], str]
Scorer = Callable[[GenerationRequest], TokenScores]


class ScriptedBackend(BackendBase):
    def __init__(
        self,
        name: str,
        respond: Responder,
        context_chars: int | None = None,
        scorer: Scorer | None = None,
        *,
        strict: bool = False,
    ) -> None:
        """`context_chars`: a context measured in characters (one per token), to test overflow handling.
        `scorer`: answers scoring requests (default `scripted_scores`). `strict`: the responder's reply is
        held to the contract as a sampled one is, a character a token (`tests/test_backend_contract.py`):
        cut by its token cap and by the room the context leaves (finish `length`), ended by a stop string,
        counted in characters; a scoring request's continuation counts in its prompt; a grammar is refused
        (a scripted reply is written, not sampled under it). Off (the unit tests of rules), a reply is
        returned whole, cut only at a stop string: those tests script exact replies."""
        super().__init__(name)
        self.respond = respond
        self.scorer = scorer or scripted_scores
        self.context_chars = context_chars
        self.strict = strict
        self.requests: list[GenerationRequest] = []
        self._queued: list[tuple[int, GenerationRequest]] = []

    def _grammar_unsupported(self) -> str | None:
        return "its replies are scripted, not sampled under a grammar" if self.strict else None

    def _queue(self, ticket: int, request: GenerationRequest) -> None:
        self._stop_strings(ticket, request)
        self._queued.append((ticket, request))
        self.requests.append(request)

    @property
    def busy(self) -> bool:
        return bool(self._queued)

    def _step(self) -> list[tuple[int, Completion]]:
        batch, self._queued = self._queued, []
        self.counters.decode_calls += 1
        return [(ticket, self._complete(request)) for ticket, request in batch]

    def _complete(self, request: GenerationRequest) -> Completion:
        size = sum(len(message.content) for message in request.messages) + len(request.prompt or "")
        if self.strict and request.scoring is not None:
            size += len(request.scoring.continuation)
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
        text = self.respond(request)  # `step` cuts it at its stop strings
        if not self.strict:
            return Completion(text=text, finish_reason="stop", prompt_tokens=size, completion_tokens=1, latency_s=0.0)
        room = request.sampling.max_tokens if self.context_chars is None else self.context_chars - size
        text, reason = _as_sampled(text, request.sampling.stop, min(request.sampling.max_tokens, room))
        return Completion(
            text=text, finish_reason=reason, prompt_tokens=size, completion_tokens=len(text), latency_s=0.0
        )

    def count_tokens(self, text: str) -> int:
        """One token per character, as the scripted context is measured."""
        return len(text)

    def _close(self) -> None:
        self._queued.clear()


def _as_sampled(text: str, stops: tuple[str, ...], cap: int) -> tuple[str, FinishReason]:
    """What a model sampling `text` a character a step generates under a cap of `cap` characters: up to the
    end of the first stop string it completes (`stop`), else its first `cap` characters (`length` when that
    cuts it), else all of it (`stop`: the reply ended)."""
    ends = [text.find(stop) + len(stop) for stop in stops if stop and stop in text]
    first = min(ends, default=len(text) + 1)
    if first <= cap:
        return text[:first], "stop"
    if len(text) > cap:
        return text[:cap], "length"
    return text, "stop"


def scripted_scores(request: GenerationRequest) -> TokenScores:
    """Log-probabilities that depend only on the text, a character a token (as `count_tokens` counts):
    stable, and not constant."""
    assert request.scoring is not None
    prompt = (request.prompt or "".join(message.content for message in request.messages)).encode()
    head = zlib.crc32(prompt)

    def logprob(after_prompt: str) -> float:
        # the checksum of the prompt followed by `after_prompt`, the prompt hashed once
        return -1.0 - (zlib.crc32(after_prompt.encode(), head) % 400) / 100.0

    continuation = request.scoring.continuation
    return TokenScores(
        token_logprobs=tuple(logprob(f"|{index}|{char}") for index, char in enumerate(continuation)),
        choice_logprobs=tuple(logprob(f"|{choice}") for choice in request.scoring.choices),
    )
