"""`appliance bench`: the engine against raw loops and baselines, per workload; results in bench_results/."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import BaseModel

from appliance.catalog.models import Catalog
from appliance.catalog.panels import Panel
from appliance.cli.options import (
    DbOption,
    JsonOption,
    ModelsOption,
    console,
    load_models,
    load_panel,
)
from appliance.errors import ApplianceError
from appliance.store import Store

if TYPE_CHECKING:
    from appliance.bench.suite import BenchPlan


QuickOption = Annotated[bool, typer.Option("--quick", help="smaller workloads (a few minutes)")]
ModelOption = Annotated[str | None, typer.Option(help="the model to measure (a models.toml entry)")]
PanelOption = Annotated[
    str | None,
    typer.Option(help="the end-to-end workload's judges (llama_cpp: 'default'; transformers/vllm: the model alone)"),
]
OutOption = Annotated[Path, typer.Option(help="folder for the JSON and markdown results")]
SkipStatelessOption = Annotated[
    bool, typer.Option("--skip-stateless", help="leave out the end-to-end arm that reuses nothing (the slowest)")
]
AdapterSweepArgument = Annotated[
    str, typer.Argument(help="a sweep entry of models.toml (adapters = GLOB): base and checkpoints")
]
ScenarioOption = Annotated[str, typer.Option(help="the scenario the sweep plays")]
LimitOption = Annotated[int, typer.Option(min=1, help="instances per game or family")]
SizesArgument = Annotated[str, typer.Argument(help="conversation counts, e.g. 16,64,256")]
SequencesOption = Annotated[
    str | None, typer.Option(help="decode points: sequences at once, e.g. 1,4,16,32 (default: the plan's)")
]
BackendArgument = Annotated[str, typer.Argument(help="transformers or vllm")]
RequiredModelOption = Annotated[str, typer.Option(help="the models.toml entry to measure (may be synthetic)")]
ConversationsOption = Annotated[
    int | None, typer.Option(min=1, help="the end-to-end workload's conversations (default: the plan's)")
]
TurnsOption = Annotated[int | None, typer.Option(min=1, help="its turns per conversation (default: the plan's)")]
RepeatsOption = Annotated[
    int | None, typer.Option(min=1, help="runs of each decode point, the median kept (default: the plan's)")
]


bench_app = typer.Typer(
    invoke_without_command=True,
    help="Measure the engine: without a subcommand the full llama.cpp suite; each subcommand one workload. "
    "Results go to bench_results/ as JSON and markdown.",
)


@bench_app.callback()
def bench(
    context: typer.Context,
    quick: QuickOption = False,
    panel: PanelOption = None,
    out: OutOption = Path("bench_results"),
    skip_stateless: SkipStatelessOption = False,
    conversations: ConversationsOption = None,
    turns: TurnsOption = None,
    repeats: RepeatsOption = None,
    db: DbOption = None,
    models: ModelsOption = None,
    as_json: JsonOption = False,
) -> None:
    """The full suite: decode exact / fast / raw, prefill, grammars, scoring, memory, and PingPong end to end
    against its ideal and the sequential baselines; stored in the store's bench table too."""
    if context.invoked_subcommand is not None:
        return
    catalog = load_models(models)
    plan = _bench_plan(quick, _resized(conversations, turns, repeats))
    _bench_suite(catalog, load_panel(panel or "default", catalog), plan, quick=quick, stateless=not skip_stateless,
                 db=db, out=out, as_json=as_json, say=_say(as_json))  # fmt: skip


@bench_app.command("decode")
def bench_decode(
    model: ModelOption = None,
    quick: QuickOption = False,
    sequences: SequencesOption = None,
    repeats: RepeatsOption = None,
    out: OutOption = Path("bench_results"),
    models: ModelsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Decode alone for one llama.cpp entry (default smollm2-135m), its gpu_layers honoured: the raw batched
    loop, then the engine's exact, fast and shipped modes at 1-64 sequences (--quick: 1, 4, 16)."""
    from appliance.bench.suite import run_decode_bench, write_decode_outputs

    catalog = load_models(models)
    plan = _bench_plan(quick, _resized(None, None, repeats, sequences))
    decode = run_decode_bench(catalog, model or "smollm2-135m", quick=quick, plan=plan, say=_say(as_json))
    _say_written(decode, write_decode_outputs(decode, out), as_json)


@bench_app.command("scaling")
def bench_scaling(
    sizes: SizesArgument,
    model: ModelOption = None,
    panel: PanelOption = None,
    turns: TurnsOption = None,
    quick: QuickOption = False,
    out: OutOption = Path("bench_results"),
    models: ModelsOption = None,
    as_json: JsonOption = False,
) -> None:
    """The end-to-end workload alone at each conversation count, every point a fresh process: wall time,
    tokens/s, prefilled / distinct, peak KV cells and RSS, x its ideal."""
    from appliance.bench.scaling import run_scaling_bench, write_scaling_bench

    catalog = load_models(models)
    plan = _bench_plan(quick, _resized(None, turns, None))
    scaling_bench = run_scaling_bench(
        catalog,
        load_panel(panel or "default", catalog),
        parse_counts(sizes, "SIZES", "a conversation count (e.g. bench scaling 16,64,256)"),
        player=model or plan.model,
        turns=plan.turns,
        seed=plan.seed,
        say=_say(as_json),
    )
    _say_written(scaling_bench, write_scaling_bench(scaling_bench, out), as_json)


@bench_app.command("backend")
def bench_backend(
    backend: BackendArgument,
    model: RequiredModelOption,
    panel: PanelOption = None,
    quick: QuickOption = False,
    skip_stateless: SkipStatelessOption = False,
    sequences: SequencesOption = None,
    conversations: ConversationsOption = None,
    turns: TurnsOption = None,
    repeats: RepeatsOption = None,
    out: OutOption = Path("bench_results"),
    models: ModelsOption = None,
    as_json: JsonOption = False,
) -> None:
    """transformers or vLLM against its own bare loop and our llama.cpp engine on the same GGUF: decode,
    prefill, batch invariance and, with real weights, PingPong end to end (vLLM: also the plain driver)."""
    catalog = load_models(models)
    chosen = None if panel is None else load_panel(panel, catalog)
    resized = _resized(conversations, turns, repeats, sequences)
    _bench_other_backend(catalog, backend, model, chosen, quick=quick, resized=resized, stateless=not skip_stateless,
                         out=out, as_json=as_json)  # fmt: skip


@bench_app.command("adapters")
def bench_adapters(
    sweep: AdapterSweepArgument,
    scenario: ScenarioOption = "clembench",
    limit: LimitOption = 6,
    out: OutOption = Path("bench_results"),
    models: ModelsOption = None,
    as_json: JsonOption = False,
) -> None:
    """A sweep of adapters played in one run against one run per checkpoint: time and peak RSS of each."""
    from appliance.bench.adapters import run_adapter_bench, write_adapter_bench

    adapter_bench = run_adapter_bench(load_models(models), sweep, scenario, limit)
    _say_written(adapter_bench, write_adapter_bench(adapter_bench, out), as_json)


def _resized(
    conversations: int | None, turns: int | None, repeats: int | None, sequences: str | None = None
) -> dict[str, int | list[int]]:
    """The plan fields given on the command line."""
    sizes: dict[str, int | list[int] | None] = {"conversations": conversations, "turns": turns, "repeats": repeats}
    if sequences is not None:
        sizes["sequences"] = parse_counts(sequences, "--sequences", "a number of sequences (e.g. 1,4,16,32)")
    return {field: value for field, value in sizes.items() if value is not None}


def parse_counts(text: str, name: str, meaning: str) -> list[int]:
    """'16,64,256' as whole numbers of at least 1; anything else a one-line error naming `name`."""
    counts: list[int] = []
    for part in text.split(","):
        if not part.strip().isdigit() or int(part) < 1:
            raise ApplianceError(f"{name}: '{part.strip()}' is not {meaning}")
        counts.append(int(part))
    return counts


def _say(as_json: bool) -> Callable[[str], None]:
    return (lambda text: None) if as_json else console.print


def _bench_suite(
    catalog: Catalog,
    panel: Panel,
    plan: BenchPlan,
    *,
    quick: bool,
    stateless: bool,
    db: Path | None,
    out: Path,
    as_json: bool,
    say: Callable[[str], None],
) -> None:
    """The whole llama.cpp suite, stored in the store's bench table and written as JSON and Markdown."""
    from appliance.bench.suite import run_bench, write_outputs

    with Store.open(db) as store:  # opened first: a bad --db fails before minutes of work
        report = run_bench(catalog, panel, quick=quick, plan=plan, stateless=stateless, say=say)
        store.write_bench(
            report.bench_id,
            report.started_at,
            report.quick,
            report.machine,
            report.versions,
            json.loads(report.model_dump_json()),
        )
    json_path, markdown_path = write_outputs(report, out)
    if as_json:
        print(report.model_dump_json())
        return
    for name, target in report.targets.items():
        console.print(
            f"{name}: wanted {target['target']}, measured {target['measured']} -> "
            f"{'met' if target['met'] else 'NOT met'}"
        )
    console.print(f"wrote {json_path} and {markdown_path}")


def _bench_plan(quick: bool, resized: dict[str, int | list[int]]) -> BenchPlan:
    """The llama.cpp benches' plan, quick or full, with the sizes given on the command line."""
    from appliance.bench.suite import BenchPlan

    return (BenchPlan.quick() if quick else BenchPlan()).model_copy(update=resized)


def _say_written(report: BaseModel, paths: tuple[Path, Path], as_json: bool) -> None:
    """A bench's report as JSON on stdout, or where its two files went."""
    if as_json:
        print(report.model_dump_json())
    else:
        console.print(f"wrote {paths[0]} and {paths[1]}")


def _bench_other_backend(
    catalog: Catalog,
    backend: str,
    model: str,
    panel: Panel | None,
    *,
    quick: bool,
    resized: dict[str, int | list[int]],
    stateless: bool,
    out: Path,
    as_json: bool,
) -> None:
    from appliance.bench.backend_bench import BackendBenchPlan, run_backend_bench, write_backend_outputs

    if backend not in ("transformers", "vllm"):
        raise ApplianceError(f"BACKEND: unknown backend '{backend}' (transformers or vllm; llama_cpp is the suite)")
    spec = catalog.get(model)
    if spec.backend != backend:
        raise ApplianceError(f"--model: '{model}' uses backend '{spec.backend}', not '{backend}'")
    report = run_backend_bench(
        catalog,
        spec,
        quick=quick,
        plan=(BackendBenchPlan.quick() if quick else BackendBenchPlan()).model_copy(update=resized),
        panel=panel,
        stateless=stateless,
        say=(lambda text: None) if as_json else console.print,
    )
    _say_written(report, write_backend_outputs(report, out), as_json)
