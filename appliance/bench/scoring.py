"""Workload 4: likelihood judging (prefill only) through the engine against a raw batched prefill loop.

Items are conversations with a reply; the judge template's requests for each (follow-ups,
conditional and prior scores) all go to the engine at once, as `appliance calibrate` sends them.
The raw loop is the same requests' tokens prefilled by bare `llama_decode` calls, packed up to
the batch size with the scored rows' logits read and normalised: what the work costs without
prefix sharing. Prefill here is compute-bound, so the engine's gain is the tokens it does not
compute; `ideal_s` is the engine's computed tokens at the raw loop's rate.
"""

from __future__ import annotations

import random
import time

import llama_cpp as C
from pydantic import BaseModel

from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.llama_native import LlamaModel, TokenBatch, default_threads, new_context
from appliance.engine.scoring import log_softmax
from appliance.engine.types import GenerationRequest
from appliance.episodes.client import ModelClient, RoleBinding
from appliance.episodes.pool import ModelPool
from appliance.episodes.scheduler import Scheduler
from appliance.judging.scoring import scoring_features
from appliance.judging.scoring_templates import ScoringTemplate

_SUBJECTS = ["my dog", "the weather", "a film I saw", "my new job", "cooking pasta", "a trip to Lisbon", "chess"]
_REPLIES = ["That sounds lovely, tell me more about it.", "I do not know.", "Pasta is my favourite food too!"]


class ScoringBench(BaseModel):
    items: int
    requests: int
    #: tokens of every request (prompt + continuation), what the raw loop computes
    request_tokens: int
    #: tokens the engine computed (the rest came from shared prefixes)
    computed_tokens: int
    engine_s: float
    raw_s: float
    #: the engine's computed tokens at the raw loop's tokens per second
    ideal_s: float
    raw_tokens_per_s: float
    speedup: float
    items_per_minute: float


def bench_items(count: int, seed: int) -> list[dict[str, str]]:
    """Conversations of four exchanges with a reply to judge, from our own small word lists."""
    rng = random.Random(seed)
    items = []
    for index in range(count):
        subject = rng.choice(_SUBJECTS)
        lines = [
            f"User: Hi! I want to talk about {subject}.",
            f"System: Sure, what about {subject} interests you?",
            f"User: Mostly how {subject} changed over the years, item {index}.",
            "System: It changed a lot, especially in the last ten years.",
            "User: Really? Why do you think so?",
        ]
        items.append({"context": "\n".join(lines), "response": rng.choice(_REPLIES), "speaker": "System"})
    return items


def engine_scoring(
    backend: LlamaCppBackend, template: ScoringTemplate, items: list[dict[str, str]]
) -> list[GenerationRequest]:
    """Every item's features through the scheduler at once; returns the requests the engine served."""
    served: list[GenerationRequest] = []
    submit = backend.submit

    def recording_submit(request: GenerationRequest) -> int:
        served.append(request)
        return submit(request)

    backend.submit = recording_submit  # type: ignore[method-assign]
    roles = {f"judge:{backend.name}": RoleBinding(model=backend.name)}

    async def features(entry: tuple[int, dict[str, str]], scheduler: Scheduler) -> dict[str, float]:
        index, item = entry
        client = ModelClient(f"bench-{index}", 0, scheduler, roles)
        return await scoring_features(client, template, item, backend.name, "j")

    try:  # every item at once; the backend stays the caller's
        ModelPool({backend.name: backend}, parallel=max(1, len(items))).play(list(enumerate(items)), features)
    finally:
        backend.submit = submit  # type: ignore[method-assign]
    return served


def raw_prefill(
    model: LlamaModel,
    sequences: list[tuple[list[int], int]],
    *,
    batch_tokens: int = 512,
    flash_attention: bool = False,
    threads: int | None = None,
) -> float:
    """Seconds for bare `llama_decode` calls over every (tokens, first scored position), packed to the batch size,
    each scored row's logits normalised; one KV stream per sequence in flight."""
    longest = max(len(tokens) for tokens, _ in sequences)
    per_call = max(1, batch_tokens // max(1, longest))
    call_tokens = max(batch_tokens, longest)
    context = new_context(
        model,
        model.name,
        sequences=per_call,
        context_length=longest + 1,
        batch_tokens=call_tokens,
        threads=threads or default_threads(),
        kv_unified=True,
        flash_attention=flash_attention,
    )
    memory = C.llama_get_memory(context)
    batch = TokenBatch(call_tokens)
    try:
        started = time.perf_counter()
        for start in range(0, len(sequences), per_call):
            group = sequences[start : start + per_call]
            C.llama_memory_clear(memory, True)
            batch.clear()
            read = []
            for seq, (tokens, first) in enumerate(group):
                for position, token in enumerate(tokens):
                    index = batch.add(token, position, seq, position >= first)
                    if position >= first:
                        read.append(index)
            if C.llama_decode(context, batch.raw) != 0:
                raise RuntimeError("llama_decode failed in the raw prefill loop")
            for index in read:
                log_softmax(model.logits_row(context, index))
        return time.perf_counter() - started
    finally:
        batch.close()
        C.llama_free(context)


def scoring_bench(backend: LlamaCppBackend, template: ScoringTemplate, items: int, seed: int) -> ScoringBench:
    texts = bench_items(items, seed)
    started = time.perf_counter()
    before = (backend.counters.prompt_tokens, backend.counters.cached_prompt_tokens)
    served = engine_scoring(backend, template, texts)
    engine_s = time.perf_counter() - started
    request_tokens = backend.counters.prompt_tokens - before[0]
    computed = request_tokens - (backend.counters.cached_prompt_tokens - before[1])
    sequences = []
    for request in served:  # each scored from its prompt's last token on
        tokens, reads = backend.request_reads(request)
        sequences.append((tokens, reads.start))
    raw_s = raw_prefill(backend.model, sequences)
    raw_rate = sum(len(tokens) for tokens, _ in sequences) / raw_s
    return ScoringBench(
        items=items,
        requests=len(served),
        request_tokens=request_tokens,
        computed_tokens=computed,
        engine_s=engine_s,
        raw_s=raw_s,
        ideal_s=computed / raw_rate,
        raw_tokens_per_s=raw_rate,
        speedup=raw_s / engine_s,
        items_per_minute=items * 60.0 / engine_s,
    )
