"""Workload 1: aggregate decode throughput of the engine against the raw loop."""

from __future__ import annotations

import time
from statistics import median

from pydantic import BaseModel

from appliance.bench.prompts import bench_prompts
from appliance.bench.raw_loop import DecodeTiming, raw_batched_decode
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.llama_native import LlamaModel
from appliance.engine.types import GenerationRequest, ResolvedSampling


class RawConfig(BaseModel):
    """The bare loop's context settings; the ceiling uses whichever measured fastest."""

    flash_attention: bool
    kv_unified: bool


class DecodePoint(BaseModel):
    sequences: int
    new_tokens: int
    repeats: int
    #: the engine in exact mode (batch-invariant: aligned prefill chunks, only whole aligned chunks of
    #: prefill-computed KV reused, one KV stream per sequence) with the ceiling's attention kernel
    engine_tokens_per_s: float
    raw_tokens_per_s: float
    ratio: float
    #: the engine in fast mode (any KV reused, free chunking, the ceiling's kernel and KV layout)
    engine_fast_tokens_per_s: float | None = None
    ratio_fast: float | None = None
    #: the engine as models.toml ships it: exact mode, flash attention off
    engine_default_tokens_per_s: float | None = None
    ratio_default: float | None = None


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


def fastest_raw_config(
    model: LlamaModel, tokens: list[list[int]], new_tokens: int, *, context_length: int, threads: int | None
) -> tuple[RawConfig, dict[str, float]]:
    """Every flash-attention x KV-layout setting of the bare loop once; the fastest is the ceiling."""
    rates: dict[str, float] = {}
    configs = [RawConfig(flash_attention=f, kv_unified=u) for f in (False, True) for u in (False, True)]
    for config in configs:
        timing = raw_batched_decode(
            model, tokens, new_tokens, context_length=context_length, threads=threads, **config.model_dump()
        )
        rates[f"flash={config.flash_attention},unified={config.kv_unified}"] = timing.tokens_per_s
    best = max(configs, key=lambda c: rates[f"flash={c.flash_attention},unified={c.kv_unified}"])
    return best, rates


def decode_point(
    backend: LlamaCppBackend,
    sequences: int,
    new_tokens: int,
    seed: int,
    repeats: int = 3,
    *,
    raw_config: RawConfig | None = None,
    fast_backend: LlamaCppBackend | None = None,
    default_backend: LlamaCppBackend | None = None,
    threads: int | None = None,
) -> DecodePoint:
    """The engine (exact mode; fast mode and the shipped default where given) and the raw loop alternately
    on the same prompts, cold caches; medians of `repeats`."""
    prompts = bench_prompts(sequences, seed)
    tokens = [backend.model.tokenize(prompt, parse_special=True) for prompt in prompts]
    settings = (raw_config or RawConfig(flash_attention=False, kv_unified=False)).model_dump()
    engine_rates: list[float] = []
    fast_rates: list[float] = []
    default_rates: list[float] = []
    raw_rates: list[float] = []
    for _ in range(repeats):
        backend.forget_caches()
        engine_rates.append(engine_decode(backend, prompts, new_tokens).tokens_per_s)
        if fast_backend is not None:
            fast_backend.forget_caches()
            fast_rates.append(engine_decode(fast_backend, prompts, new_tokens).tokens_per_s)
        if default_backend is not None:
            default_backend.forget_caches()
            default_rates.append(engine_decode(default_backend, prompts, new_tokens).tokens_per_s)
        raw = raw_batched_decode(
            backend.model, tokens, new_tokens, context_length=backend.context_length, threads=threads, **settings
        )
        raw_rates.append(raw.tokens_per_s)
    engine_rate, raw_rate = median(engine_rates), median(raw_rates)
    fast_rate = median(fast_rates) if fast_rates else None
    default_rate = median(default_rates) if default_rates else None
    return DecodePoint(
        sequences=sequences,
        new_tokens=new_tokens,
        repeats=repeats,
        engine_tokens_per_s=engine_rate,
        raw_tokens_per_s=raw_rate,
        ratio=engine_rate / raw_rate if raw_rate else 0.0,
        engine_fast_tokens_per_s=fast_rate,
        ratio_fast=fast_rate / raw_rate if fast_rate is not None and raw_rate else None,
        engine_default_tokens_per_s=default_rate,
        ratio_default=default_rate / raw_rate if default_rate is not None and raw_rate else None,
    )
