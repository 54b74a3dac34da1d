"""Workload 1: aggregate decode throughput of the engine against the raw loop."""

from __future__ import annotations

import random
import time
from statistics import median

from pydantic import BaseModel

from appliance.bench.raw_loop import DecodeTiming, raw_batched_decode
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.types import GenerationRequest, ResolvedSampling

TOPICS = ["a lighthouse", "a dragon", "the sea", "a clock", "a garden", "a train", "winter", "a library"]


class DecodePoint(BaseModel):
    sequences: int
    new_tokens: int
    repeats: int
    engine_tokens_per_s: float
    raw_tokens_per_s: float
    ratio: float


def bench_prompts(count: int, seed: int) -> list[str]:
    """Distinct chat-formatted prompts of similar length (ChatML, as the embedded SmolLM2 uses)."""
    rng = random.Random(seed)
    return [
        f"<|im_start|>user\nWrite a long story number {index} about {rng.choice(TOPICS)}.<|im_end|>\n"
        "<|im_start|>assistant\n"
        for index in range(count)
    ]


def engine_decode(backend: LlamaCppBackend, prompts: list[str], new_tokens: int) -> DecodeTiming:
    sampling = ResolvedSampling(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
    started = time.perf_counter()
    for prompt in prompts:
        backend.submit(GenerationRequest(prompt=prompt, sampling=sampling))
    generated = prefilled = 0
    while backend.busy:
        for _, completion in backend.step():
            generated += completion.completion_tokens
            prefilled += completion.prefilled_tokens
    return DecodeTiming(len(prompts), generated, prefilled, time.perf_counter() - started)


def decode_point(backend: LlamaCppBackend, sequences: int, new_tokens: int, seed: int, repeats: int = 3) -> DecodePoint:
    """Engine and raw loop alternately on the same prompts, cold caches; medians of `repeats`."""
    prompts = bench_prompts(sequences, seed)
    tokens = [backend.model.tokenize(prompt, parse_special=True) for prompt in prompts]
    engine_rates: list[float] = []
    raw_rates: list[float] = []
    for _ in range(repeats):
        backend.forget_caches()
        engine_rates.append(engine_decode(backend, prompts, new_tokens).tokens_per_s)
        raw = raw_batched_decode(backend.model, tokens, new_tokens, context_length=backend.context_length)
        raw_rates.append(raw.tokens_per_s)
    engine_rate, raw_rate = median(engine_rates), median(raw_rates)
    return DecodePoint(
        sequences=sequences,
        new_tokens=new_tokens,
        repeats=repeats,
        engine_tokens_per_s=engine_rate,
        raw_tokens_per_s=raw_rate,
        ratio=engine_rate / raw_rate if raw_rate else 0.0,
    )
