"""The ideal time of a workload on this machine: what no engine could beat.

Every distinct prompt token (the prefix tree of all prompts) computed once at
the raw batched prefill rate, plus every generated token at the raw batched
decode rate with as many sequences as the workload runs at once. Both rates
are measured here with bare `llama_decode` loops at the ceiling's settings.
It is a lower bound: a conversation's turns depend on each other, so real
decoding never keeps every sequence busy.
"""

from __future__ import annotations

from pydantic import BaseModel

from appliance.bench.decode import RawConfig
from appliance.bench.e2e import EndToEndResult
from appliance.bench.prompts import bench_prompts
from appliance.bench.raw_loop import raw_batched_decode
from appliance.bench.scoring import raw_prefill
from appliance.catalog import Catalog
from appliance.engine.llama_native import LlamaModel

#: context per sequence of the raw decode measurement (short prompts, 32 new tokens)
_DECODE_CONTEXT = 256


class IdealTime(BaseModel):
    unique_prefill_tokens: dict[str, int]
    decode_tokens: dict[str, int]
    raw_prefill_tokens_per_s: dict[str, float]
    raw_decode_tokens_per_s: dict[str, float]
    #: sequences decoding at once in the raw decode measurement
    decode_sequences: int
    ideal_s: float
    #: the appliance's wall time as a multiple of the ideal time
    appliance_multiple: float


def ideal_time(catalog: Catalog, e2e: EndToEndResult, raw: RawConfig, *, seed: int) -> IdealTime:
    prefill_rates: dict[str, float] = {}
    decode_rates: dict[str, float] = {}
    for name, sample in e2e.prompt_sample.items():
        spec = catalog.get(name)
        model = LlamaModel(catalog.resolve_path(spec), name, spec.gpu_layers)
        try:
            sequences = [(tokens, len(tokens) - 1) for tokens in sample]
            prefill_rates[name] = sum(len(t) for t in sample) / raw_prefill(
                model, sequences, flash_attention=raw.flash_attention, threads=spec.threads
            )
            if e2e.decode_tokens_by_model.get(name):
                prompts = [model.tokenize(p, parse_special=True) for p in bench_prompts(e2e.conversations, seed)]
                decode_rates[name] = raw_batched_decode(
                    model, prompts, 32, context_length=_DECODE_CONTEXT, threads=spec.threads, **raw.model_dump()
                ).tokens_per_s
        finally:
            model.close()
    ideal = sum(e2e.unique_prefill_tokens_by_model[name] / rate for name, rate in prefill_rates.items()) + sum(
        e2e.decode_tokens_by_model[name] / rate for name, rate in decode_rates.items()
    )
    return IdealTime(
        unique_prefill_tokens=e2e.unique_prefill_tokens_by_model,
        decode_tokens=e2e.decode_tokens_by_model,
        raw_prefill_tokens_per_s=prefill_rates,
        raw_decode_tokens_per_s=decode_rates,
        decode_sequences=e2e.conversations,
        ideal_s=ideal,
        appliance_multiple=e2e.appliance.wall_s / ideal if ideal else 0.0,
    )
