"""The interface every backend offers to the scheduler.

A backend is stepped: `submit` queues requests, each `step` advances every
queued and running request by one decode step (one `llama_decode` over all
live sequences for llama.cpp) and returns the requests that finished. The
scheduler interleaves steps with the episodes that produce requests, which
is what makes the batching continuous.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Protocol

from appliance.engine.types import Completion, FinishReason, GenerationRequest
from appliance.errors import ApplianceError


@dataclass
class BackendCounters:
    """Running totals for reports and benchmarks."""

    requests: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    decode_calls: int = 0
    forked_tokens: int = 0  # prompt tokens copied from another sequence's cache
    peak_kv_cells: int = 0  # most tokens held in the KV cache at once
    moved_caches: int = 0  # caches moved to keep decoding sequences on consecutive ids
    kv_resyncs: int = 0  # prefills restarted because a sequence's KV did not end where its record said
    #: prompt tokens found in a cache but computed again: decode-computed KV, or (exact mode) KV past
    #: the last whole aligned chunk, or a cache too short to be worth a fork
    recomputed_cached_tokens: int = 0
    restored_tokens: int = 0  # prompt tokens served by a cache copied back from host memory
    saved_caches: int = 0  # caches copied to host memory before their slot was overwritten
    #: prefill-computed tokens lost when a cache was overwritten: dropped from host memory for its
    #: budget, or not saved at all (asked for again, they are computed again)
    evicted_tokens: int = 0
    host_cache_peak_bytes: int = 0  # most bytes the host-memory cache held at once
    grammar_rejections: int = 0  # sampled tokens a grammar refused (then sampled again under it)
    prefill_s: float = 0.0  # seconds inside the model on prefill chunks (where the backend can tell)
    decode_s: float = 0.0  # seconds inside the model on decode steps
    sample_s: float = 0.0  # seconds sampling tokens (and checking stop strings)


class Backend(Protocol):
    name: str
    counters: BackendCounters

    def submit(self, request: GenerationRequest) -> int:
        """Queue a request; the returned ticket identifies its completion."""
        ...

    def step(self) -> list[tuple[int, Completion]]:
        """Advance all work by one step; return the tickets that finished."""
        ...

    @property
    def busy(self) -> bool:
        """Whether any submitted request has not finished yet."""
        ...

    def count_tokens(self, text: str) -> int:
        """How many tokens `text` takes with this model's tokenizer (games size their reply caps with it)."""
        ...

    def close(self) -> None:
        """Free the model; afterwards `submit` refuses, and closing again does nothing."""
        ...


#: the finish reasons of a request refused before anything of it was computed
REFUSED: frozenset[FinishReason] = frozenset({"context_overflow", "error"})


class BackendBase:
    """What every backend does the same way, written once: tickets, the counters, stop strings, the
    overflow rule, the refusal of a grammar the backend cannot enforce, and the closed state.

    A backend writes its primitives on top: `_queue` (a request under its ticket), `_step` (one step's
    finished requests), `_close`, `count_tokens` and `busy`. The public `submit`, `step` and `close`
    are written here, so no backend counts a token, cuts a stop string or checks its closed state by
    hand, and the conformance suite (`tests/test_backend_contract.py`) holds each to the contract."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.counters = BackendCounters()
        #: set by `close`: the backend takes no more requests
        self.closed = False
        self._next_ticket = 0
        #: each unfinished request's stop strings (its own and its chat format's), by ticket
        self._stops: dict[int, tuple[str, ...]] = {}

    def submit(self, request: GenerationRequest) -> int:
        """Queue a request; the returned ticket identifies its completion. Refused with an ApplianceError
        once the backend is closed, and for a grammar it cannot enforce (never silently ignored)."""
        if self.closed:
            raise ApplianceError(f"model '{self.name}' is closed: it takes no more requests")
        if request.grammar is not None and request.scoring is None:
            why = self._grammar_unsupported()
            if why is not None:
                kind = type(self).__name__
                raise ApplianceError(f"model '{self.name}' ({kind}) cannot enforce a GBNF grammar: {why}")
        ticket = self._next_ticket
        self._queue(ticket, request)  # a request it refuses to queue (an unknown adapter) takes no ticket
        return self._ticket()

    def step(self) -> list[tuple[int, Completion]]:
        """Advance all work by one step (the backend's `_step`); each finished request is cut at its
        stop strings and counted here, once. A closed backend finishes nothing."""
        if self.closed:
            return []
        return [(ticket, self._finished(ticket, completion)) for ticket, completion in self._step()]

    def close(self) -> None:
        """Free what the backend holds (`_close`); requests still queued are dropped unanswered. Afterwards
        `submit` refuses and `step` finishes nothing; closing again does nothing."""
        if self.closed:
            return
        self.closed = True
        self._stops.clear()
        self._close()

    # -- the primitives a backend writes ----------------------------------

    def _queue(self, ticket: int, request: GenerationRequest) -> None:
        """Take `request` under `ticket` (answered by a later `_step`)."""
        raise NotImplementedError

    def _step(self) -> list[tuple[int, Completion]]:
        """One step of work; the requests it finished, uncounted."""
        raise NotImplementedError

    def _close(self) -> None:
        """Free the model and everything queued (called once)."""

    def _grammar_unsupported(self) -> str | None:
        """Why this backend cannot enforce a request's GBNF grammar (None: it enforces them)."""
        return None

    # -- bookkeeping -------------------------------------------------------

    def _ticket(self) -> int:
        """The next request's ticket; the request is counted. (`submit` calls it; a backend that writes
        its own `submit`, as the Ray remote one does, calls it too.)"""
        ticket = self._next_ticket
        self._next_ticket += 1
        self.counters.requests += 1
        return ticket

    def _stop_strings(
        self, ticket: int, request: GenerationRequest, formatted: tuple[str, ...] = ()
    ) -> tuple[str, ...]:
        """The stop strings a request's reply ends at: its own, then those its chat format adds (each once).
        Remembered under its ticket, where `step` cuts the finished reply; the backend watches for them
        while it decodes."""
        stops = tuple(dict.fromkeys(stop for stop in (*request.sampling.stop, *formatted) if stop))
        if stops:
            self._stops[ticket] = stops
        return stops

    def _finished(self, ticket: int, completion: Completion) -> Completion:
        """A finished request: its reply cut before its first stop string, then counted."""
        stops = self._stops.pop(ticket, ())
        if stops and completion.scores is None:
            text = cut_at_stop(completion.text, stops)
            if text != completion.text:
                completion = completion.model_copy(update={"text": text})
        return self._counted(completion)

    def _counted(self, completion: Completion) -> Completion:
        """A finished request's prompt, cached and generated tokens added to the counters: what was
        computed, so a request refused before anything of it was computed adds no token."""
        if completion.finish_reason in REFUSED and completion.completion_tokens == 0:
            return completion
        self.counters.prompt_tokens += completion.prompt_tokens
        self.counters.cached_prompt_tokens += completion.cached_prompt_tokens
        self.counters.completion_tokens += completion.completion_tokens
        return completion

    def _refusal(
        self, request: GenerationRequest, prompt_tokens: int, context_length: int, latency_s: float = 0.0
    ) -> Completion | None:
        """The overflow rule (`overflow_refusal`) in this backend's name."""
        return overflow_refusal(self.name, request, prompt_tokens, context_length, latency_s)


def cut_at_stop(text: str, stops: Iterable[str]) -> str:
    """A reply ends before the first stop string it holds, on every backend."""
    cuts = [text.find(stop) for stop in stops if stop and stop in text]
    return text[: min(cuts)] if cuts else text


#: the words every overflow refusal carries: reports tell an episode whose prompt did not fit from one that failed
OVERFLOW_MARK = "does not fit the context"


def overflow_message(model: str, prompt_tokens: int, context_length: int, reply_tokens: int | None) -> str:
    """Why a request is refused as `context_overflow`: the same words on every backend."""
    reply = "" if reply_tokens is None else f" and {reply_tokens} for the reply"
    fits = f"{OVERFLOW_MARK} of {context_length} tokens of model '{model}'"
    return f"prompt of {prompt_tokens} tokens{reply} {fits}"


def did_not_fit(error: str | None) -> bool:
    """Whether an episode's error is a prompt that did not fit its model's context (not a failure of the model)."""
    return error is not None and OVERFLOW_MARK in error


def overflow_refusal(
    model: str, request: GenerationRequest, prompt_tokens: int, context_length: int, latency_s: float = 0.0
) -> Completion | None:
    """The contract every backend keeps (`GenerationRequest.reserve_output`): a prompt that leaves no
    room to generate, or not `max_tokens` when the request reserves them, is refused as
    `context_overflow` before anything is decoded; None when it fits. Exactly at the limit it fits: a
    prompt of `context_length - 1` tokens leaves room for one generated token, and a prompt and its
    reserved `max_tokens` that add up to `context_length` fit (the last generated token is never fed
    back, so it needs no cell)."""
    room = context_length - prompt_tokens
    reserve = request.reserve_output and request.scoring is None
    if room > 0 and not (reserve and room < request.sampling.max_tokens):
        return None
    error = overflow_message(model, prompt_tokens, context_length, request.sampling.max_tokens if reserve else None)
    return Completion(
        text="",
        finish_reason="context_overflow",
        prompt_tokens=prompt_tokens,
        completion_tokens=0,
        latency_s=latency_s,
        error=error,
    )


def with_adapter(
    request: GenerationRequest, backend: str, adapters: Collection[str], default: str | None
) -> GenerationRequest:
    """`request` naming the adapter it plays on a backend that hosts `adapters`: the one it names, else
    the backend's default (None: the base); a name the backend does not hold is a bug upstream, and an
    error. Copied only when the adapter changes (most requests name none and have no default)."""
    adapter = request.adapter or default
    if adapter is not None and adapter not in adapters:
        raise ApplianceError(f"model '{backend}' holds no adapter '{adapter}'")
    return request if adapter == request.adapter else request.model_copy(update={"adapter": adapter})


def distinct_backends(backends: Iterable[Backend]) -> list[Backend]:
    """Each backend once, however many model names it serves (a base and its adapters share one)."""
    return list({id(backend): backend for backend in backends}.values())
