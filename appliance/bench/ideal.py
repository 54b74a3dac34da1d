"""The ideal time of a workload on this machine: what no engine could beat.

Every distinct prompt token (the prefix tree of all prompts) computed once at
the raw batched prefill rate, every distinct logits row a scoring request reads
paid once at its raw cost (a row passes the hidden state through the output
matrix, Gemma 3's 262k x 640 one included, and normalises it), plus every
generated token at the raw batched decode rate with as many sequences as the
workload runs at once. The rates are measured here with bare `llama_decode`
loops at the ceiling's settings. It is a lower bound: a conversation's turns
depend on each other, so real decoding never keeps every sequence busy.

The figure without the rows (`ideal_without_rows_s`) is kept beside it: it is
what the bench reported before rows were counted, and the gap between the two
is work a likelihood judge cannot skip.
"""

from __future__ import annotations

from pydantic import BaseModel

from appliance.bench.decode import RawConfig
from appliance.bench.e2e import Workload
from appliance.bench.prompts import bench_prompts
from appliance.bench.raw_loop import raw_batched_decode
from appliance.bench.scoring import raw_prefill
from appliance.catalog.backends import LlamaCppOptions
from appliance.catalog.models import Catalog
from appliance.engine.llama_native import LlamaModel

#: context per sequence of the raw decode measurement (short prompts, 32 new tokens)
_DECODE_CONTEXT = 256
#: the leading tokens of each sampled prompt that the row cost is measured on
_ROW_PROBE_TOKENS = 128


class IdealTime(BaseModel):
    workload: Workload
    raw_prefill_tokens_per_s: dict[str, float]
    #: milliseconds one more logits row costs in the raw prefill loop (read and normalised)
    raw_row_ms: dict[str, float] = {}
    raw_decode_tokens_per_s: dict[str, float]
    #: sequences decoding at once in the raw decode measurement
    decode_sequences: int
    ideal_s: float
    #: the ideal without the logits rows the workload reads
    ideal_without_rows_s: float = 0.0
    #: the appliance's wall time as a multiple of the ideal time (and of the ideal without rows)
    appliance_multiple: float
    appliance_multiple_without_rows: float = 0.0


def ideal_time(
    catalog: Catalog, workload: Workload, wall_s: float, raw: RawConfig, *, sequences: int, seed: int
) -> IdealTime:
    """The ideal time of `workload`, and `wall_s` (the appliance's) against it."""
    prefill_rates: dict[str, float] = {}
    row_ms: dict[str, float] = {}
    decode_rates: dict[str, float] = {}
    for name, sample in workload.prompt_sample.items():
        spec = catalog.get(name)
        options = spec.options_as(LlamaCppOptions)
        model = LlamaModel(catalog.resolve_path(spec), name, options.gpu_layers)
        try:
            last_rows = [(tokens, len(tokens) - 1) for tokens in sample]
            prefill_rates[name] = sum(len(t) for t in sample) / raw_prefill(
                model, last_rows, flash_attention=raw.flash_attention, threads=options.threads
            )
            row_ms[name] = 1000 * raw_row_seconds(model, sample, raw, options.threads)
            if workload.decode_tokens.get(name):
                prompts = [model.tokenize(p, parse_special=True) for p in bench_prompts(sequences, seed)]
                decode_rates[name] = raw_batched_decode(
                    model, prompts, 32, context_length=_DECODE_CONTEXT, threads=options.threads, **raw.model_dump()
                ).tokens_per_s
        finally:
            model.close()
    without_rows = sum(workload.distinct_prompt_tokens[name] / rate for name, rate in prefill_rates.items()) + sum(
        workload.decode_tokens[name] / rate for name, rate in decode_rates.items()
    )
    ideal = without_rows + sum(workload.read_rows.get(name, 0) * ms / 1000 for name, ms in row_ms.items())
    return IdealTime(
        workload=workload,
        raw_prefill_tokens_per_s=prefill_rates,
        raw_row_ms=row_ms,
        raw_decode_tokens_per_s=decode_rates,
        decode_sequences=sequences,
        ideal_s=ideal,
        ideal_without_rows_s=without_rows,
        appliance_multiple=wall_s / ideal if ideal else 0.0,
        appliance_multiple_without_rows=wall_s / without_rows if without_rows else 0.0,
    )


def ideal_markdown(ideal: IdealTime) -> list[str]:
    """The ideal's inputs per model and the appliance against it (the bench's report and the scaling report)."""
    work = ideal.workload
    rows = [
        f"| {name} | {work.distinct_prompt_tokens.get(name, 0)} | {ideal.raw_prefill_tokens_per_s.get(name, 0):.0f} | "
        f"{work.read_rows.get(name, 0)} | {ideal.raw_row_ms.get(name, 0):.2f} | {work.decode_tokens.get(name, 0)} | "
        f"{ideal.raw_decode_tokens_per_s.get(name, 0):.0f} |"
        for name in ideal.raw_prefill_tokens_per_s
    ]
    return [
        "| model | distinct prompt tokens | raw prefill tok/s | logits rows read | raw ms per row | decode tokens "
        f"| raw decode tok/s ({ideal.decode_sequences} sequences) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        f"Ideal {ideal.ideal_s:.1f} s (a lower bound: turns depend on each other); the appliance took "
        f"{ideal.appliance_multiple:.2f}x of it. Without the logits rows read the ideal is "
        f"{ideal.ideal_without_rows_s:.1f} s ({ideal.appliance_multiple_without_rows:.2f}x).",
    ]


def raw_row_seconds(model: LlamaModel, sample: list[list[int]], raw: RawConfig, threads: int | None) -> float:
    """What one more logits row costs in the raw prefill loop: the sample's leading tokens prefilled reading
    every row, against reading only the last (the faster of two tries each, as the machine drifts)."""
    probes = [tokens[:_ROW_PROBE_TOKENS] for tokens in sample if len(tokens) > 1]
    extra_rows = sum(len(tokens) - 1 for tokens in probes)
    if not extra_rows:
        return 0.0

    def fastest(every_row: bool) -> float:
        rows = [(tokens, 0 if every_row else len(tokens) - 1) for tokens in probes]
        return min(raw_prefill(model, rows, flash_attention=raw.flash_attention, threads=threads) for _ in range(2))

    return max(0.0, fastest(every_row=True) - fastest(every_row=False)) / extra_rows
