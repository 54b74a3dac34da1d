"""Workload 3: memory with many live conversations under a KV budget.

Runs in its own process (`python -m appliance.bench.memory`) so that its
peak RSS is its own. Every conversation is live at once; with a budget
smaller than all their caches, idle caches are evicted least recently used
first and recomputed when their conversation returns.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from pathlib import Path

from pydantic import BaseModel

from appliance.bench.rss import peak_rss_kilobytes
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.types import GenerationRequest, Message, ResolvedSampling
from appliance.episodes.pool import ModelPool
from appliance.episodes.scheduler import Scheduler

QUESTIONS = ["What do you do all day?", "What worries you?", "Tell me about your home.", "What do you eat?"]


class MemoryResult(BaseModel):
    conversations: int
    turns: int
    context_length: int
    kv_budget_mb: int
    slots: int
    kv_bytes_per_token: int
    peak_kv_cells: int
    peak_kv_mb: float
    peak_rss_mb: float
    prompt_tokens: int
    cached_prompt_tokens: int
    wall_s: float


async def _conversation(index: int, scheduler: Scheduler, *, turns: int) -> None:
    persona = f"You are character number {index}, a {['baker', 'sailor', 'poet', 'judge'][index % 4]}. " * 12
    history = [Message(role="system", content=persona)]
    for turn in range(turns):
        history.append(Message(role="user", content=QUESTIONS[turn % len(QUESTIONS)]))
        request = GenerationRequest(
            messages=tuple(history),
            sampling=ResolvedSampling(temperature=0.0, max_tokens=32),
            conversation_key=f"conversation-{index}",
        )
        reply = await scheduler.generate("model", request)
        history.append(Message(role="assistant", content=reply.text))


def measure(model: Path, conversations: int, turns: int, context_length: int, budget_mb: int) -> MemoryResult:
    backend = LlamaCppBackend(
        model,
        name="memory",
        context_length=context_length,
        slots=conversations,
        kv_budget_mb=budget_mb,
        host_cache_mb=0,  # the KV under its budget alone, as measured before the host cache existed
    )
    started = time.perf_counter()
    try:
        pool = ModelPool({"model": backend}, parallel=conversations)  # the backend stays this function's
        pool.play(range(conversations), partial(_conversation, turns=turns))
        counters = backend.counters
        slots = len(backend.slots)
        per_token = backend.kv_bytes_per_token
    finally:
        backend.close()
    peak_rss_kb = peak_rss_kilobytes()
    return MemoryResult(
        conversations=conversations,
        turns=turns,
        context_length=context_length,
        kv_budget_mb=budget_mb,
        slots=slots,
        kv_bytes_per_token=per_token,
        peak_kv_cells=counters.peak_kv_cells,
        peak_kv_mb=counters.peak_kv_cells * per_token / 2**20,
        peak_rss_mb=peak_rss_kb / 1024,
        prompt_tokens=counters.prompt_tokens,
        cached_prompt_tokens=counters.cached_prompt_tokens,
        wall_s=time.perf_counter() - started,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model", type=Path)
    parser.add_argument("--conversations", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--context-length", type=int, default=1024)
    parser.add_argument("--budget-mb", type=int, default=1024)
    args = parser.parse_args()
    result = measure(args.model, args.conversations, args.turns, args.context_length, args.budget_mb)
    print(json.dumps(result.model_dump()))


if __name__ == "__main__":
    main()
