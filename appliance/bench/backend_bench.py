"""`appliance bench backend transformers|vllm --model NAME`: the engine's throughput on another backend.

The same workloads as the llama.cpp bench, through the `Backend` interface:

- decode at 1..256 sequences (greedy, EOS ignored), against the backend's own
  bare loop (transformers: one static `generate` call over the left-padded
  batch; vLLM: one `LLM.generate` over the same prompts, as a user would run
  vLLM without us), and, for a model whose GGUF a llama.cpp entry of the
  catalog also loads, against our llama.cpp engine on that GGUF (as shipped, and
  fast mode);
- prefill: prompts of `prompt_tokens` tokens with a one-token reply, against one
  batched forward pass (transformers);
- batch invariance: the greedy text of each of 16 prompts decoded alone and in one
  batch of 16 (on a GPU in bfloat16 the two can differ: kernels pick their
  reduction order by batch shape).

A synthetic-weight model (`synthetic = "llama-1b"` in models.toml) is marked so:
its rates are real, its text is noise. The report records the device, its
driver and the library versions, and for a GPU of known memory bandwidth the
single-stream ceiling (bandwidth / bytes of weights read per decode step).
With real weights the PingPong end-to-end workload runs too, the model in
every role, against the sequential stateless baseline on the same backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

from pydantic import BaseModel

from appliance.bench.e2e import (
    EndToEndResult,
    appliance_arm,
    end_to_end,
    markdown_lines,
    with_side_arm,
    workload_config,
)
from appliance.bench.machine import describe_machine, nvidia_smi
from appliance.bench.outputs import write_bench_files
from appliance.bench.plain_driver import with_plain_arm
from appliance.bench.prompts import bench_prompts
from appliance.catalog.models import Catalog, ModelSpec
from appliance.catalog.panels import Panel, get_panel
from appliance.engine.backend import Backend
from appliance.engine.factory import open_backend
from appliance.engine.types import GenerationRequest, ResolvedSampling
from appliance.errors import ApplianceError
from appliance.paths import judges_dir
from appliance.run.runner import package_versions
from appliance.scenarios import load_family
from appliance.scenarios.pingpong.family import PingPongFamily

#: memory bandwidth (bytes/s) of GPUs whose single-stream decode ceiling the report computes
KNOWN_BANDWIDTH = {"H100": 3.35e12, "H200": 4.8e12, "A100": 2.0e12, "L40S": 8.64e11, "RTX 4090": 1.0e12}


class BackendBenchPlan(BaseModel):
    sequences: list[int] = [1, 4, 16, 32, 64]
    new_tokens: int = 64
    prompt_tokens: int = 512
    prefill_sequences: list[int] = [1, 8]
    repeats: int = 3
    seed: int = 0
    #: prompts decoded alone and then in one batch for the batch-invariance check (0: left out)
    invariance_prompts: int = 16
    #: the PingPong workload (real weights only; 0 conversations: left out): conversations x turns, the
    #: model as player, user and judge
    conversations: int = 16
    turns: int = 4

    @classmethod
    def quick(cls) -> BackendBenchPlan:
        return cls(
            sequences=[1, 4],
            new_tokens=16,
            prompt_tokens=64,
            prefill_sequences=[1, 4],
            repeats=1,
            invariance_prompts=4,
            conversations=2,
            turns=1,
        )


class BackendDecodePoint(BaseModel):
    sequences: int
    engine_tokens_per_s: float
    bare_tokens_per_s: float | None
    ratio: float | None
    #: our llama.cpp engine on the same GGUF: "llama.cpp" as models.toml ships it, "llama.cpp fast"
    peers: dict[str, float] = {}


class PrefillPoint(BaseModel):
    sequences: int
    prompt_tokens: int
    engine_tokens_per_s: float
    bare_tokens_per_s: float | None


class InvarianceCheck(BaseModel):
    """Greedy replies to the same prompts decoded one at a time and all in one batch."""

    prompts: int
    new_tokens: int
    identical: int
    #: per differing prompt, the first character where the two replies part
    first_difference: list[int]


class BackendBenchReport(BaseModel):
    bench_id: str
    started_at: datetime
    backend: str
    model: str
    synthetic: bool
    parameters: int | None
    quick: bool
    plan: BackendBenchPlan
    machine: dict[str, Any]
    device: dict[str, Any]
    versions: dict[str, str]
    decode: list[BackendDecodePoint]
    prefill: list[PrefillPoint]
    invariance: InvarianceCheck | None = None
    #: PingPong with the model in every role against the sequential stateless baseline (real weights only)
    e2e: EndToEndResult | None = None
    #: bytes of weights read per decode step, and the single-stream rate the device's bandwidth allows
    weight_bytes: int | None
    bandwidth_ceiling_tokens_per_s: float | None
    notes: list[str]
    wall_s: float


def run_backend_bench(
    catalog: Catalog,
    spec: ModelSpec,
    *,
    quick: bool,
    say: Callable[[str], None],
    plan: BackendBenchPlan | None = None,
    panel: Panel | None = None,
    stateless: bool = True,
) -> BackendBenchReport:
    """Decode, prefill and batch invariance of `spec`'s backend, then the PingPong workload with `spec` as
    player and interrogator and `panel` judging (default: `spec` alone) on the appliance, the sequential
    baselines (the one that reuses nothing unless `stateless` is off), the plain driver (vLLM) and, where every
    model has a llama.cpp twin on the same GGUF, the appliance on llama.cpp."""
    plan = plan or (BackendBenchPlan.quick() if quick else BackendBenchPlan())
    panel = panel or _model_alone(spec)
    if spec.backend == "vllm" and panel.likelihood_template_or_none is None:
        raise ApplianceError(
            f"--panel: '{panel.name}' samples verdicts; the vLLM bench's plain driver reads probabilities"
        )
    started = time.perf_counter()
    started_at = datetime.now(UTC).replace(tzinfo=None)
    backend = open_backend(catalog, spec, parallel=max(plan.sequences) // 4 or 1)
    try:
        say(f"{spec.backend} bench of {spec.name} ({spec.describe_source()})")
        decode = [_decode_point(backend, sequences, plan, say) for sequences in plan.sequences]
        for point in decode:
            point.peers = _llama_peers(catalog, spec, point.sequences, plan, say)
        prefill = [_prefill_point(backend, sequences, plan, say) for sequences in plan.prefill_sequences]
        invariance = _invariance(backend, plan, say) if plan.invariance_prompts else None
        device = describe_device(backend)
        weight_bytes = _weight_bytes(backend)
    finally:
        backend.close()
    e2e = (
        None
        if spec.synthetic is not None or not plan.conversations
        else _pingpong(catalog, spec, panel, plan, stateless, say)
    )
    bandwidth = next((b for name, b in KNOWN_BANDWIDTH.items() if name in str(device.get("name", ""))), None)
    notes = []
    if spec.synthetic is not None:
        notes.append("synthetic (random) weights: the rates are real, the text is noise; no PingPong workload")
    elif not plan.conversations:
        notes.append("the PingPong workload was left out of this run (0 conversations)")
    shape = spec.synthetic_shape
    return BackendBenchReport(
        bench_id=started_at.strftime("%Y%m%d-%H%M%S") + f"-{spec.backend}" + ("-quick" if quick else ""),
        started_at=started_at,
        backend=spec.backend,
        model=spec.name,
        synthetic=spec.synthetic is not None,
        parameters=shape.parameters() if shape is not None else None,
        quick=quick,
        plan=plan,
        machine=describe_machine(),
        device=device,
        versions=package_versions(("appliance", "torch", "transformers", "accelerate", "vllm", "llama-cpp-python")),
        decode=decode,
        prefill=prefill,
        invariance=invariance,
        e2e=e2e,
        weight_bytes=weight_bytes,
        bandwidth_ceiling_tokens_per_s=bandwidth / weight_bytes if bandwidth and weight_bytes else None,
        notes=notes,
        wall_s=time.perf_counter() - started,
    )


def _model_alone(spec: ModelSpec) -> Panel:
    """The benchmarked model as the only judge, reading the default panel's template (follow-ups read as
    probabilities), so the end-to-end workload judges the way a default run does."""
    template = get_panel(judges_dir() / "panels.toml", "default").likelihood_template
    return Panel(name="bench", judges=[spec.name], judging="likelihood", likelihood_template=template)


def _pingpong(
    catalog: Catalog,
    spec: ModelSpec,
    panel: Panel,
    plan: BackendBenchPlan,
    stateless: bool,
    say: Callable[[str], None],
) -> EndToEndResult:
    say(
        f"  end to end: PingPong, {plan.conversations} conversations x {plan.turns} turns, {spec.name} as player and "
        f"interrogator, judges {panel.judges}"
    )
    pingpong = load_family("pingpong")
    assert isinstance(pingpong, PingPongFamily)
    e2e = end_to_end(
        catalog,
        pingpong,
        conversations=plan.conversations,
        turns=plan.turns,
        player=spec.name,
        interrogator=spec.name,
        panel=panel,
        seed=plan.seed,
        parallel=plan.conversations,
        stateless=stateless,
    )
    say(
        f"    appliance {e2e.appliance.wall_s:.1f} s, single-slot baseline {e2e.baseline.wall_s:.1f} s, "
        f"speedup {e2e.speedup:.2f}x"
    )
    if spec.backend == "vllm":
        # vLLM's own way: each phase one LLM.generate over every conversation
        e2e = with_plain_arm(
            e2e, catalog, pingpong, player=spec.name, interrogator=spec.name, panel=panel, seed=plan.seed
        )
        assert e2e.plain is not None
        say(f"    plain driver {e2e.plain.wall_s:.1f} s ({e2e.plain_messages_differing} messages differ)")
    twins = {name: llama_cpp_twin(catalog, catalog.get(name)) for name in {spec.name, *panel.judges}}
    if spec.backend != "llama_cpp" and all(twin is not None for twin in twins.values()):
        on_llama = {name: twin.name for name, twin in twins.items() if twin is not None}
        twin_panel = panel.model_copy(
            update={"name": f"{panel.name}-llama-cpp", "judges": [on_llama[judge] for judge in panel.judges]}
        )
        config = workload_config(
            catalog,
            pingpong,
            conversations=plan.conversations,
            turns=plan.turns,
            player=on_llama[spec.name],
            interrogator=on_llama[spec.name],
            panel=twin_panel,
            seed=plan.seed,
            parallel=plan.conversations,
        )
        arm, texts, _ = appliance_arm(catalog, pingpong, config)
        e2e = with_side_arm(e2e, "llama_cpp", arm, texts)
        say(f"    the appliance on llama.cpp {arm.wall_s:.1f} s ({e2e.llama_cpp_messages_differing} messages differ)")
    return e2e


def _invariance(backend: Backend, plan: BackendBenchPlan, say: Callable[[str], None]) -> InvarianceCheck:
    prompts = bench_prompts(plan.invariance_prompts, plan.seed + 1)
    alone = [_replies(backend, _requests([prompt], plan.new_tokens))[0] for prompt in prompts]
    together = _replies(backend, _requests(prompts, plan.new_tokens))
    parted = [
        next((i for i, (a, b) in enumerate(zip(one, other, strict=False)) if a != b), min(len(one), len(other)))
        for one, other in zip(alone, together, strict=True)
        if one != other
    ]
    check = InvarianceCheck(
        prompts=len(prompts), new_tokens=plan.new_tokens, identical=len(prompts) - len(parted), first_difference=parted
    )
    say(f"  batch invariance: {check.identical}/{check.prompts} greedy replies identical alone and in one batch")
    return check


def _replies(backend: Backend, requests: list[GenerationRequest]) -> list[str]:
    tickets = [backend.submit(request) for request in requests]
    done: dict[int, str] = {}
    while backend.busy:
        done.update((ticket, completion.text) for ticket, completion in backend.step())
    return [done[ticket] for ticket in tickets]


def _requests(prompts: list[str], max_tokens: int) -> list[GenerationRequest]:
    sampling = ResolvedSampling(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return [GenerationRequest(prompt=prompt, sampling=sampling) for prompt in prompts]


def _engine_rate(backend: Backend, requests: list[GenerationRequest], count: Callable[[Any], int]) -> float:
    started = time.perf_counter()
    tokens = 0
    for request in requests:
        backend.submit(request)
    while backend.busy:
        tokens += sum(count(completion) for _, completion in backend.step())
    return tokens / (time.perf_counter() - started)


def _decode_point(
    backend: Backend, sequences: int, plan: BackendBenchPlan, say: Callable[[str], None]
) -> BackendDecodePoint:
    prompts = bench_prompts(sequences, plan.seed)
    engine, bare = [], []
    for _ in range(plan.repeats):
        engine.append(_engine_rate(backend, _requests(prompts, plan.new_tokens), lambda c: c.completion_tokens))
        rate = bare_generate_rate(backend, prompts, plan.new_tokens)
        if rate is not None:
            bare.append(rate)
    point = BackendDecodePoint(
        sequences=sequences,
        engine_tokens_per_s=median(engine),
        bare_tokens_per_s=median(bare) if bare else None,
        ratio=median(engine) / median(bare) if bare else None,
    )
    shown = f"{point.bare_tokens_per_s:.1f}" if point.bare_tokens_per_s is not None else "-"
    say(f"  decode {sequences:>3} sequences: engine {point.engine_tokens_per_s:.1f} tok/s, bare {shown} tok/s")
    return point


def _llama_peers(
    catalog: Catalog, spec: ModelSpec, sequences: int, plan: BackendBenchPlan, say: Callable[[str], None]
) -> dict[str, float]:
    """Our llama.cpp engine on the same GGUF as `spec` (a llama_cpp entry with the same source), as shipped
    and in fast mode, on the same prompts; empty when no entry shares the file."""
    from appliance.catalog.backends import LlamaCppOptions
    from appliance.engine.llama_cpp_backend import LlamaCppBackend

    twin = llama_cpp_twin(catalog, spec) if spec.backend != "llama_cpp" else None
    if twin is None:
        return {}
    options = twin.options_as(LlamaCppOptions)
    source = catalog.resolve_path(twin)
    rates: dict[str, float] = {}
    for arm, fast in (("llama.cpp", False), ("llama.cpp fast", True)):
        engine = LlamaCppBackend(
            source,
            name=twin.name,
            context_length=twin.context_length,
            slots=sequences,
            threads=options.threads,
            flash_attention=fast or options.flash_attention,
            exact_kv=options.exact_kv and not fast,
            kv_unified=fast,
            gpu_layers=options.gpu_layers,
        )
        try:
            prompts = bench_prompts(sequences, plan.seed)
            rates[arm] = median(
                _engine_rate(engine, _requests(prompts, plan.new_tokens), lambda c: c.completion_tokens)
                for _ in range(plan.repeats)
            )
        finally:
            engine.close()
    say("    " + ", ".join(f"{arm} {rate:.1f} tok/s" for arm, rate in rates.items()))
    return rates


def llama_cpp_twin(catalog: Catalog, spec: ModelSpec) -> ModelSpec | None:
    """The llama_cpp entry that loads the same GGUF as `spec` (itself for a llama_cpp entry); None if none does."""
    if spec.backend == "llama_cpp" or spec.synthetic is not None:
        return spec if spec.synthetic is None else None
    source = catalog.resolve_path(spec, assemble=False)  # compared by where they are: nothing is joined here
    return next(
        (
            m
            for m in catalog.models.values()
            if m.backend == "llama_cpp"
            and m.synthetic is None
            and m.adapter is None
            and catalog.resolve_path(m, assemble=False) == source
        ),
        None,
    )


def _prefill_point(
    backend: Backend, sequences: int, plan: BackendBenchPlan, say: Callable[[str], None]
) -> PrefillPoint:
    prompts = [_long_prompt(backend, plan.prompt_tokens, index) for index in range(sequences)]
    engine = median(
        _engine_rate(backend, _requests(prompts, 1), lambda c: c.prompt_tokens - c.cached_prompt_tokens)
        for _ in range(plan.repeats)
    )
    bare = bare_forward_rate(backend, prompts)
    say(f"  prefill {sequences:>3} x {plan.prompt_tokens} tokens: engine {engine:.1f} tok/s")
    return PrefillPoint(
        sequences=sequences, prompt_tokens=plan.prompt_tokens, engine_tokens_per_s=engine, bare_tokens_per_s=bare
    )


def _long_prompt(backend: Backend, tokens: int, index: int) -> str:
    """A prompt of about `tokens` tokens that shares no prefix with the others (no cache reuse)."""
    words = f"{index} " + " ".join(f"word{index}x{n}" for n in range(tokens))
    while backend.count_tokens(words) > tokens:
        words = words[: int(len(words) * 0.9)]
    return words


def _padded_batch(backend: Backend, prompts: list[str]) -> tuple[Any, Any, Any, Any] | None:
    """(torch, model, ids, mask) of the prompts left-padded into one batch, for a backend that holds a
    torch model and a tokenizer (transformers); None for others."""
    torch, model, tokenizer = (getattr(backend, name, None) for name in ("torch", "model", "tokenizer"))
    if torch is None or model is None or tokenizer is None:
        return None
    rows = [tokenizer.encode(prompt, add_special_tokens=False) for prompt in prompts]
    width = max(len(row) for row in rows)
    device = getattr(backend, "device", "cpu")
    ids = torch.tensor([[0] * (width - len(row)) + row for row in rows], device=device)
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows], device=device)
    return torch, model, ids, mask


def _timed_on_batch(backend: Backend, prompts: list[str], run: Callable[[Any, Any, Any], None]) -> float | None:
    """Seconds `run(model, ids, mask)` takes on the prompts left-padded into one batch (None: no torch model)."""
    batch = _padded_batch(backend, prompts)
    if batch is None:
        return None
    torch, model, ids, mask = batch
    on_gpu = ids.device.type == "cuda"
    if on_gpu:
        torch.cuda.synchronize()
    started = time.perf_counter()
    with torch.inference_mode():
        run(model, ids, mask)
    if on_gpu:  # kernels are queued asynchronously: the clock stops when the GPU has finished them
        torch.cuda.synchronize()
    return time.perf_counter() - started


def bare_generate_rate(backend: Backend, prompts: list[str], new_tokens: int) -> float | None:
    """The backend's own bare loop: for transformers one static `generate` over the left-padded batch,
    for vLLM one `LLM.generate` over the prompts."""
    llm = getattr(backend, "llm", None)
    if llm is not None:
        import vllm

        params = vllm.SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
        started = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        generated = sum(len(output.outputs[0].token_ids) for output in outputs)
        return generated / (time.perf_counter() - started)

    def generate(model: Any, ids: Any, mask: Any) -> None:
        model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
        )

    seconds = _timed_on_batch(backend, prompts, generate)
    return None if seconds is None else len(prompts) * new_tokens / seconds


def bare_forward_rate(backend: Backend, prompts: list[str]) -> float | None:
    """One forward pass over all prompts at once (left-padded): the bare prefill rate."""
    seconds = _timed_on_batch(backend, prompts, lambda model, ids, mask: model(input_ids=ids, attention_mask=mask))
    tokens = sum(backend.count_tokens(prompt) for prompt in prompts)
    return None if seconds is None else tokens / seconds


def describe_device(backend: Backend) -> dict[str, Any]:
    """The device the backend decodes on, its name and driver where it is a GPU."""
    device = str(getattr(backend, "device", "cpu"))
    info: dict[str, Any] = {"device": device, "name": "CPU"}
    torch = getattr(backend, "torch", None)
    if torch is not None and device.startswith("cuda"):
        index = torch.device(device).index or 0
        info["name"] = torch.cuda.get_device_name(index)
        info["cuda"] = torch.version.cuda
        info["memory_gb"] = round(torch.cuda.get_device_properties(index).total_memory / 2**30, 1)
        driver = nvidia_smi("driver_version")
        info["driver"] = driver[0] if driver else None
    return info


def _weight_bytes(backend: Backend) -> int | None:
    model = getattr(backend, "model", None)
    if model is None or not hasattr(model, "parameters"):
        return None
    return int(sum(p.numel() * p.element_size() for p in model.parameters()))


def write_backend_outputs(report: BackendBenchReport, folder: Path) -> tuple[Path, Path]:
    return write_bench_files(folder, f"bench-{report.bench_id}", report, render_backend_markdown(report))


def render_backend_markdown(report: BackendBenchReport) -> str:
    device = report.device
    kind = "synthetic weights" if report.synthetic else "real weights"
    ceiling = report.bandwidth_ceiling_tokens_per_s
    lines = [
        f"# appliance bench {report.bench_id}",
        "",
        f"Backend {report.backend}, model {report.model} ({kind}"
        + (f", {report.parameters / 1e6:,.1f}M parameters" if report.parameters else "")
        + f"), device {device.get('name')} ({device.get('device')}"
        + (f", driver {device['driver']}, CUDA {device.get('cuda')}" if device.get("driver") else "")
        + f"); torch {report.versions.get('torch')}, transformers {report.versions.get('transformers')}. "
        f"Total {report.wall_s:.0f} s.",
        "",
        *_decode_lines(report),
        "## Prefill",
        "",
        "| sequences | prompt tokens | engine tok/s | one batched forward tok/s |",
        "| ---: | ---: | ---: | ---: |",
        *[
            f"| {p.sequences} | {p.prompt_tokens} | {p.engine_tokens_per_s:.1f} | "
            + (f"{p.bare_tokens_per_s:.1f} |" if p.bare_tokens_per_s else "- |")
            for p in report.prefill
        ],
        "",
        f"Weights read per decode step: {report.weight_bytes / 1e9:.3f} GB; single-stream bandwidth ceiling: "
        + (f"{ceiling:.0f} tok/s." if ceiling else "no known bandwidth for this device.")
        if report.weight_bytes
        else "",
        "",
        *(_invariance_lines(report.invariance) if report.invariance is not None else []),
        *(markdown_lines(report.e2e) if report.e2e is not None else []),
        *[f"- {note}" for note in report.notes],
        "",
    ]
    return "\n".join(lines)


def _decode_lines(report: BackendBenchReport) -> list[str]:
    """The decode table: the engine against the backend's bare loop and every peer arm (llama.cpp)."""
    peers = sorted({arm for point in report.decode for arm in point.peers})
    return [
        "## Decode (greedy, EOS ignored, prefill included)",
        "",
        "| sequences | engine tok/s | bare loop tok/s | engine / bare |"
        + "".join(f" {arm} tok/s | engine / {arm} |" for arm in peers),
        "| ---: | ---: | ---: | ---: |" + " ---: | ---: |" * len(peers),
        *[
            f"| {p.sequences} | {p.engine_tokens_per_s:.1f} | "
            + (f"{p.bare_tokens_per_s:.1f} | {p.ratio:.2f} |" if p.bare_tokens_per_s and p.ratio else "- | - |")
            + "".join(
                f" {p.peers[arm]:.1f} | {p.engine_tokens_per_s / p.peers[arm]:.2f} |" if arm in p.peers else " - | - |"
                for arm in peers
            )
            for p in report.decode
        ],
        "",
    ]


def _invariance_lines(check: InvarianceCheck) -> list[str]:
    parted = f" (the others part at characters {check.first_difference})" if check.first_difference else ""
    return [
        f"Batch invariance: {check.identical} of {check.prompts} greedy replies ({check.new_tokens} tokens) are "
        f"identical decoded alone and in one batch of {check.prompts}{parted}.",
        "",
    ]
