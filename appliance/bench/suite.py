"""`appliance bench`: the workloads in one process, one after another.

Targets (SmolLM2-135M Q4_1, 2 threads, nothing else running): engine decode
throughput in fast mode at 16 and 32 sequences >= 90% of the raw loop at its
fastest settings (flash attention and KV layout measured first; exact mode's
cost is reported beside it); the PingPong workload >= 3x faster than the
sequential baseline with single-slot prefix reuse, transcripts identical at the
token level; peak RSS <= 1.5 GB with 64 live conversations.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from appliance.bench.decode import DecodePoint, RawConfig, decode_point, fastest_raw_config
from appliance.bench.e2e import EndToEndResult, end_to_end, markdown_lines
from appliance.bench.grammar import GrammarBench, grammar_bench
from appliance.bench.grammar import markdown_lines as grammar_lines
from appliance.bench.ideal import IdealTime, ideal_markdown, ideal_time
from appliance.bench.machine import describe_machine
from appliance.bench.memory import MemoryResult
from appliance.bench.outputs import write_bench_files
from appliance.bench.prompts import bench_prompts
from appliance.bench.scoring import ScoringBench, scoring_bench
from appliance.catalog.backends import LlamaCppOptions
from appliance.catalog.models import Catalog, ModelSpec, sha256_of
from appliance.catalog.panels import Panel
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.llama_native import LlamaModel
from appliance.judging.scoring_templates import ExpectedScoreTemplate, LikelihoodTemplate
from appliance.judging.templates import LikertTemplate, load_judge_template
from appliance.paths import judges_dir
from appliance.run.runner import package_versions
from appliance.scenarios import ScenarioFamily, load_family

TARGET_DECODE_RATIO = 0.90
TARGET_E2E_SPEEDUP = 3.0
TARGET_PEAK_RSS_MB = 1536.0
#: context per sequence in the decode workload (prompts of ~30 tokens and up to 64 new ones)
RAW_CONTEXT = 256


class BenchPlan(BaseModel):
    model: str = "smollm2-135m"
    #: likelihood-judged items in the scoring workload (each: the template's follow-ups, conditional, prior)
    scoring_items: int = 48
    #: sampled verdicts under a judge grammar, by a model with a large vocabulary
    grammar_model: str = "gemma3-270m"
    grammar_requests: int = 8
    grammar_tokens: int = 48
    sequences: list[int] = [1, 4, 16, 32, 64]
    new_tokens: int = 64
    conversations: int = 16
    turns: int = 4
    memory_conversations: int = 64
    memory_turns: int = 3
    memory_context: int = 1024
    memory_budget_mb: int = 1024
    seed: int = 0
    repeats: int = 3

    @classmethod
    def quick(cls) -> BenchPlan:
        return cls(
            sequences=[1, 4, 16],
            new_tokens=32,
            conversations=4,
            turns=2,
            memory_conversations=16,
            memory_turns=2,
            memory_budget_mb=256,
            repeats=1,
            scoring_items=12,
            grammar_requests=4,
            grammar_tokens=32,
        )


class BenchRun(BaseModel):
    """What every llama.cpp bench report opens with: when, on what, with which plan."""

    bench_id: str
    started_at: datetime
    quick: bool
    plan: BenchPlan
    machine: dict[str, Any]
    versions: dict[str, str]


class BenchReport(BenchRun):
    model_hashes: dict[str, str]
    decode: list[DecodePoint]
    #: the bare loop's settings that measured fastest (the ceiling), and every setting's rate
    raw_config: RawConfig | None = None
    raw_configs: dict[str, float] = {}
    #: exact mode / raw, fast mode / raw, and exact / fast (exact mode's cost), per sequence count
    engine_vs_raw: dict[str, float]
    engine_fast_vs_raw: dict[str, float] = {}
    exact_vs_fast: dict[str, float] = {}
    e2e: EndToEndResult
    e2e_speedup: float
    transcripts_identical: bool
    #: the end-to-end workload's ideal time on this machine, and the appliance's wall time against it
    ideal: IdealTime | None = None
    memory: MemoryResult
    peak_rss_mb: float
    scoring: ScoringBench | None = None
    grammar: GrammarBench | None = None
    targets: dict[str, dict[str, Any]]
    wall_s: float


def run_bench(
    catalog: Catalog,
    panel: Panel,
    *,
    quick: bool,
    say: Callable[[str], None],
    stateless: bool = True,
    plan: BenchPlan | None = None,
) -> BenchReport:
    """The three workloads in turn (decode, end to end, memory), then the targets they are held to."""
    plan = plan or (BenchPlan.quick() if quick else BenchPlan())
    started = time.perf_counter()
    started_at = datetime.now(UTC).replace(tzinfo=None)
    raw_config, raw_configs = _ceiling(catalog, plan, say)
    points = _decode_points(catalog, plan, raw_config, say)
    e2e = _pingpong_end_to_end(catalog, panel, plan, say, stateless=stateless)
    ideal = ideal_time(
        catalog, e2e.workload, e2e.appliance.wall_s, raw_config, sequences=e2e.conversations, seed=plan.seed
    )
    say(
        f"  ideal time {ideal.ideal_s:.1f} s (distinct prompt tokens {ideal.workload.distinct_prompt_tokens}, "
        f"rows read {ideal.workload.read_rows}, decode {ideal.workload.decode_tokens}); the appliance took "
        f"{ideal.appliance_multiple:.2f}x of it ({ideal.appliance_multiple_without_rows:.2f}x without the rows)"
    )
    say(f"memory: {plan.memory_conversations} live conversations, KV budget {plan.memory_budget_mb} MB")
    memory = _memory_in_subprocess(catalog.resolve_path(catalog.get(plan.model)), plan)
    say(
        f"  peak RSS {memory.peak_rss_mb:.0f} MB, peak KV {memory.peak_kv_cells} cells ({memory.peak_kv_mb:.0f} MB), "
        f"{memory.slots} slots"
    )
    scoring = _scoring(catalog, plan, say)
    grammar = _grammar(catalog, plan, say)
    ratios = {str(point.sequences): round(point.ratio, 4) for point in points}
    fast = {str(p.sequences): round(p.ratio_fast, 4) for p in points if p.ratio_fast is not None}
    exact_cost = _exact_costs(points)
    hashes = {name: sha256_of(catalog.resolve_path(catalog.get(name))) for name in {plan.model, *panel.judges}}
    return BenchReport(
        bench_id=started_at.strftime("%Y%m%d-%H%M%S") + ("-quick" if quick else ""),
        started_at=started_at,
        quick=quick,
        plan=plan,
        machine=describe_machine(),
        versions=package_versions(),
        model_hashes=hashes,
        decode=points,
        raw_config=raw_config,
        raw_configs=raw_configs,
        engine_vs_raw=ratios,
        engine_fast_vs_raw=fast,
        exact_vs_fast=exact_cost,
        e2e=e2e,
        e2e_speedup=e2e.speedup,
        transcripts_identical=e2e.transcripts_identical,
        ideal=ideal,
        memory=memory,
        peak_rss_mb=memory.peak_rss_mb,
        scoring=scoring,
        grammar=grammar,
        targets=_targets(fast, e2e, memory, plan),
        wall_s=time.perf_counter() - started,
    )


class DecodeBenchReport(BenchRun):
    """`appliance bench decode`: the decode workload alone, for any llama_cpp entry (one offloaded
    to a GPU, or a synthetic-weight GGUF, where the end-to-end workload's panel is not at hand)."""

    model_hash: str
    model_bytes: int
    gpu_layers: int | None
    decode: list[DecodePoint]
    raw_config: RawConfig
    raw_configs: dict[str, float]
    exact_vs_fast: dict[str, float]
    wall_s: float


def run_decode_bench(
    catalog: Catalog, model: str, *, quick: bool, say: Callable[[str], None], plan: BenchPlan | None = None
) -> DecodeBenchReport:
    """The ceiling search and the decode points of `model` (its `gpu_layers` honoured)."""
    plan = (plan or (BenchPlan.quick() if quick else BenchPlan())).model_copy(update={"model": model})
    spec = catalog.get(model)
    options = spec.options_as(LlamaCppOptions)
    path = catalog.resolve_path(spec)
    started = time.perf_counter()
    started_at = datetime.now(UTC).replace(tzinfo=None)
    raw_config, raw_configs = _ceiling(catalog, plan, say)
    points = _decode_points(catalog, plan, raw_config, say)
    return DecodeBenchReport(
        bench_id=started_at.strftime("%Y%m%d-%H%M%S") + "-decode",
        started_at=started_at,
        quick=quick,
        plan=plan,
        machine=describe_machine(),
        versions=package_versions(),
        model_hash=sha256_of(path),
        model_bytes=path.stat().st_size,
        gpu_layers=options.gpu_layers,
        decode=points,
        raw_config=raw_config,
        raw_configs=raw_configs,
        exact_vs_fast=_exact_costs(points),
        wall_s=time.perf_counter() - started,
    )


def _exact_costs(points: list[DecodePoint]) -> dict[str, float]:
    """Exact mode's rate over fast mode's, per sequence count."""
    return {
        str(p.sequences): round(p.engine_tokens_per_s / p.engine_fast_tokens_per_s, 4)
        for p in points
        if p.engine_fast_tokens_per_s
    }


def write_decode_outputs(report: DecodeBenchReport, folder: Path) -> tuple[Path, Path]:
    gpu = report.machine.get("gpu")
    lines = [
        f"# appliance bench {report.bench_id}",
        "",
        f"Machine: {report.machine['cpu']}, {report.machine['cores']} cores, {report.machine['memory_gb']} GB; "
        f"GPU: {gpu['name'] + ', driver ' + gpu['driver'] if gpu else 'none'}; llama-cpp-python "
        f"{report.versions.get('llama-cpp-python')}; model {report.plan.model} ({report.model_bytes / 2**20:.1f} MiB, "
        f"sha256 {report.model_hash[:16]}...), gpu_layers {report.gpu_layers}. Total {report.wall_s:.0f} s.",
        "",
        *_decode_lines(report.raw_config, report.raw_configs, report.decode, report.exact_vs_fast),
    ]
    return write_bench_files(folder, f"bench-{report.bench_id}", report, "\n".join(lines))


def _ceiling(catalog: Catalog, plan: BenchPlan, say: Callable[[str], None]) -> tuple[RawConfig, dict[str, float]]:
    """The bare loop's fastest settings, measured once at the largest sequence count of the plan."""
    spec = catalog.get(plan.model)
    options = spec.options_as(LlamaCppOptions)
    sequences = max(plan.sequences)
    model = LlamaModel(catalog.resolve_path(spec), spec.name, options.gpu_layers)
    try:
        tokens = [model.tokenize(prompt, parse_special=True) for prompt in bench_prompts(sequences, plan.seed)]
        best, rates = fastest_raw_config(
            model, tokens, plan.new_tokens, context_length=RAW_CONTEXT, threads=options.threads
        )
    finally:
        model.close()
    shown = ", ".join(f"{name} {rate:.1f}" for name, rate in rates.items())
    say(f"ceiling: raw loop settings at {sequences} sequences (tok/s): {shown}; fastest: {best}")
    return best, rates


def _engine(model_path: Path, spec: ModelSpec, sequences: int, *, ceiling: RawConfig, mode: str) -> LlamaCppBackend:
    """The engine in one of three modes: "exact" (aligned chunks, one KV stream per sequence, the ceiling's
    attention kernel), "fast" (any KV reused, free chunking, the ceiling's kernel and KV layout) or
    "default" (exact with flash attention off, as models.toml ships)."""
    options = spec.options_as(LlamaCppOptions)
    return LlamaCppBackend(
        model_path,
        name=spec.name,
        context_length=RAW_CONTEXT,
        slots=sequences,
        threads=options.threads,
        flash_attention=ceiling.flash_attention and mode != "default",
        exact_kv=mode != "fast",
        kv_unified=mode == "fast" and ceiling.kv_unified,
        gpu_layers=options.gpu_layers,
    )


def _decode_points(
    catalog: Catalog, plan: BenchPlan, raw_config: RawConfig, say: Callable[[str], None]
) -> list[DecodePoint]:
    """The engine, exact and fast, against the fastest bare batched decode loop, one point per sequence count."""
    spec = catalog.get(plan.model)
    model_path = catalog.resolve_path(spec)
    say(f"decode: engine (exact, fast) vs raw llama_decode loop at {plan.sequences} sequences")
    points: list[DecodePoint] = []
    for sequences in plan.sequences:
        exact, fast, default = (
            _engine(model_path, spec, sequences, ceiling=raw_config, mode=mode) for mode in ("exact", "fast", "default")
        )
        try:
            point = decode_point(
                exact, sequences, plan.new_tokens, plan.seed, plan.repeats, raw_config=raw_config,
                fast_backend=fast, default_backend=default, threads=spec.options_as(LlamaCppOptions).threads,
            )  # fmt: skip
        finally:
            for backend in (exact, fast, default):
                backend.close()
        points.append(point)
        say(
            f"  {sequences:>3} sequences: engine exact {point.engine_tokens_per_s:7.1f}, "
            f"fast {point.engine_fast_tokens_per_s or 0:7.1f}, "
            f"default {point.engine_default_tokens_per_s or 0:7.1f}, raw {point.raw_tokens_per_s:7.1f} tok/s; "
            f"exact/raw {point.ratio:.2f}, fast/raw {point.ratio_fast or 0:.2f}"
        )
    return points


def _scoring(catalog: Catalog, plan: BenchPlan, say: Callable[[str], None]) -> ScoringBench:
    spec = catalog.get(plan.model)
    options = spec.options_as(LlamaCppOptions)
    template = load_judge_template(judges_dir() / "turn_likelihood.toml")
    assert isinstance(template, LikelihoodTemplate | ExpectedScoreTemplate)
    say(f"scoring: {plan.scoring_items} items judged by likelihood ({template.name}), engine vs raw prefill loop")
    backend = LlamaCppBackend(
        catalog.resolve_path(spec),
        name=spec.name,
        context_length=1024,
        slots=32,
        threads=options.threads,
        gpu_layers=options.gpu_layers,
    )
    try:
        result = scoring_bench(backend, template, plan.scoring_items, plan.seed)
    finally:
        backend.close()
    say(
        f"  engine {result.engine_s:.1f} s ({result.computed_tokens} of {result.request_tokens} tokens computed), "
        f"raw prefill {result.raw_s:.1f} s ({result.raw_tokens_per_s:.0f} tok/s), ideal {result.ideal_s:.1f} s; "
        f"speedup {result.speedup:.2f}x"
    )
    return result


def _grammar(catalog: Catalog, plan: BenchPlan, say: Callable[[str], None]) -> GrammarBench:
    spec = catalog.get(plan.grammar_model)
    template = load_judge_template(judges_dir() / "pingpong_likert.toml")
    assert isinstance(template, LikertTemplate)
    say(f"grammar: {plan.grammar_requests} verdicts by {spec.name} with no grammar, strict, and sample-first")
    result = grammar_bench(catalog.resolve_path(spec), spec.name, template, plan.grammar_requests, plan.grammar_tokens)
    say(
        f"  free {result.free.tokens_per_s:.1f}, strict {result.strict.tokens_per_s:.1f}, sample-first "
        f"{result.lazy.tokens_per_s:.1f} tok/s ({result.lazy.grammar_rejections} refusals); identical: "
        f"{result.identical}"
    )
    return result


def _pingpong_end_to_end(
    catalog: Catalog, panel: Panel, plan: BenchPlan, say: Callable[[str], None], *, stateless: bool
) -> EndToEndResult:
    say(f"end to end: PingPong, {plan.conversations} conversations x {plan.turns} turns, panel {panel.judges}")
    pingpong = load_family("pingpong")
    assert isinstance(pingpong, ScenarioFamily)  # PingPong plays in one go
    e2e = end_to_end(
        catalog,
        pingpong,
        conversations=plan.conversations,
        turns=plan.turns,
        player=plan.model,
        interrogator=plan.model,
        panel=panel,
        seed=plan.seed,
        parallel=plan.conversations,
        stateless=stateless,
    )
    cold = f"{e2e.stateless.wall_s:.1f} s" if e2e.stateless else "-"
    say(
        f"  appliance {e2e.appliance.wall_s:.1f} s, single-slot baseline {e2e.baseline.wall_s:.1f} s, stateless "
        f"{cold}; speedup {e2e.speedup:.2f}x; tokens identical: {e2e.tokens_identical} "
        f"({e2e.requests_differing} requests of either arm without a twin in the other, {e2e.requests_compared} each)"
    )
    return e2e


def _targets(ratios: dict[str, float], e2e: EndToEndResult, memory: MemoryResult, plan: BenchPlan) -> dict[str, Any]:
    return {
        "engine_fast_vs_fastest_raw_at_16_32": {
            "target": f">= {TARGET_DECODE_RATIO}",
            "measured": {k: ratios[k] for k in ("16", "32") if k in ratios},
            "met": all(ratios[k] >= TARGET_DECODE_RATIO for k in ("16", "32") if k in ratios),
        },
        "e2e_speedup_vs_single_slot_baseline": {
            "target": f">= {TARGET_E2E_SPEEDUP}",
            "measured": round(e2e.speedup, 3),
            "met": e2e.speedup >= TARGET_E2E_SPEEDUP,
        },
        "e2e_tokens_identical": {
            "target": "every request's token ids (or log-probabilities) equal to the baseline's",
            "measured": f"{e2e.requests_differing} of {e2e.requests_compared} differ",
            "met": bool(e2e.tokens_identical),
        },
        "peak_rss_mb": {
            "target": f"<= {TARGET_PEAK_RSS_MB} with {plan.memory_conversations} conversations",
            "measured": round(memory.peak_rss_mb, 1),
            "met": memory.peak_rss_mb <= TARGET_PEAK_RSS_MB,
        },
    }


def _memory_in_subprocess(model: Path, plan: BenchPlan) -> MemoryResult:
    command = [
        sys.executable,
        "-m",
        "appliance.bench.memory",
        str(model),
        "--conversations",
        str(plan.memory_conversations),
        "--turns",
        str(plan.memory_turns),
        "--context-length",
        str(plan.memory_context),
        "--budget-mb",
        str(plan.memory_budget_mb),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"memory workload failed: {result.stderr[-2000:]}")
    return MemoryResult(**json.loads(result.stdout.strip().splitlines()[-1]))


def write_outputs(report: BenchReport, folder: Path) -> tuple[Path, Path]:
    return write_bench_files(folder, f"bench-{report.bench_id}", report, render_markdown(report))


def render_markdown(report: BenchReport) -> str:
    e2e = report.e2e
    lines = [
        f"# appliance bench {report.bench_id}",
        "",
        f"Machine: {report.machine['cpu']}, {report.machine['cores']} cores, {report.machine['memory_gb']} GB; "
        f"llama-cpp-python {report.versions.get('llama-cpp-python')}; model {report.plan.model} "
        f"(sha256 {report.model_hashes.get(report.plan.model, '?')[:16]}...). Total {report.wall_s:.0f} s.",
        "",
        *_decode_lines(report.raw_config, report.raw_configs, report.decode, report.exact_vs_fast),
        *markdown_lines(e2e),
        *_ideal_lines(report.ideal),
        *_scoring_lines(report.scoring),
        *grammar_lines(report.grammar),
        f"## Memory: {report.memory.conversations} live conversations x {report.memory.turns} turns",
        "",
        f"KV budget {report.memory.kv_budget_mb} MB -> {report.memory.slots} slots of {report.memory.context_length} "
        f"tokens; peak KV {report.memory.peak_kv_cells} cells ({report.memory.peak_kv_mb:.0f} MB); "
        f"peak RSS {report.memory.peak_rss_mb:.0f} MB.",
        "",
        "## Targets",
        "",
        "| target | wanted | measured | met |",
        "| --- | --- | --- | --- |",
        *[
            f"| {name} | {t['target']} | {t['measured']} | {'yes' if t['met'] else 'no'} |"
            for name, t in report.targets.items()
        ],
        "",
    ]
    return "\n".join(lines)


def _decode_lines(
    raw_config: RawConfig | None, raw_configs: dict[str, float], points: list[DecodePoint], exact_cost: dict[str, float]
) -> list[str]:
    return [
        "## Decode throughput (greedy, EOS ignored, prefill included)",
        "",
        f"Ceiling: the raw loop with its fastest settings ({raw_config}); every setting measured at the "
        f"largest count (tok/s): {', '.join(f'{k} {v:.1f}' for k, v in raw_configs.items())}.",
        "Exact mode: every prompt cut by a plan of its own (chunk ends at multiples of 64 and where a scoring "
        "request's scored part starts), prefill-computed KV reused only where the plans agree, one KV stream per "
        "sequence (batch-invariant), with the ceiling's attention kernel. Fast mode: any KV reused, free chunking, "
        "the ceiling's kernel and KV layout. Default: exact mode with flash attention off, as models.toml ships.",
        "",
        "| sequences | exact tok/s | fast tok/s | default tok/s | raw loop tok/s | exact / raw | fast / raw "
        "| default / raw | exact / fast |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *[
            f"| {p.sequences} | {p.engine_tokens_per_s:.1f} | {p.engine_fast_tokens_per_s or 0:.1f} | "
            f"{p.engine_default_tokens_per_s or 0:.1f} | {p.raw_tokens_per_s:.1f} | {p.ratio:.2f} | "
            f"{p.ratio_fast or 0:.2f} | {p.ratio_default or 0:.2f} | {exact_cost.get(str(p.sequences), 0):.2f} |"
            for p in points
        ],
        "",
    ]


def _ideal_lines(ideal: IdealTime | None) -> list[str]:
    if ideal is None:
        return []
    return [
        "### Ideal time of this workload",
        "",
        *ideal_markdown(ideal),
        "",
    ]


def _scoring_lines(scoring: ScoringBench | None) -> list[str]:
    if scoring is None:
        return []
    return [
        f"## Scoring: {scoring.items} items judged by likelihood ({scoring.requests} prefill-only requests)",
        "",
        "| arm | wall s | tokens computed | tokens/s |",
        "| --- | ---: | ---: | ---: |",
        f"| engine (shared prefixes) | {scoring.engine_s:.1f} | {scoring.computed_tokens} | "
        f"{scoring.computed_tokens / scoring.engine_s:.0f} |",
        f"| raw batched prefill loop | {scoring.raw_s:.1f} | {scoring.request_tokens} | "
        f"{scoring.raw_tokens_per_s:.0f} |",
        f"| ideal (engine's tokens at the raw rate) | {scoring.ideal_s:.1f} | {scoring.computed_tokens} | - |",
        "",
        f"Speedup over the raw loop {scoring.speedup:.2f}x; {scoring.items_per_minute:.1f} items per minute for this "
        "judge.",
        "",
    ]
