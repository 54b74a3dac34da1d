"""`appliance bench`: the engine against raw loops and baselines, per workload; results in bench_results/."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import BaseModel

from appliance.catalog import Catalog
from appliance.cli.options import (
    DbOption,
    JsonOption,
    ModelsOption,
    console,
    load_models,
    load_panel,
)
from appliance.errors import ApplianceError
from appliance.panels import Panel
from appliance.store import Store

if TYPE_CHECKING:
    from appliance.bench.suite import BenchPlan


QuickOption = Annotated[bool, typer.Option("--quick", help="smaller workloads (a few minutes)")]
BackendOption = Annotated[
    str, typer.Option(help="llama_cpp (the full suite), or transformers / vllm (decode and prefill)")
]
ModelOption = Annotated[
    str | None, typer.Option(help="the model to measure (transformers/vllm: required; may be synthetic)")
]
PanelOption = Annotated[
    str | None,
    typer.Option(help="the end-to-end workload's judges (llama_cpp: 'default'; transformers/vllm: the model alone)"),
]
OutOption = Annotated[Path, typer.Option(help="folder for the JSON and markdown results")]
SkipStatelessOption = Annotated[
    bool, typer.Option("--skip-stateless", help="leave out the end-to-end arm that reuses nothing (the slowest)")
]
DecodeOnlyOption = Annotated[
    bool,
    typer.Option(
        "--decode-only",
        help="llama_cpp: the decode workload alone, for --model (a GPU-offloaded or synthetic GGUF entry)",
    ),
]
AdaptersOption = Annotated[
    str | None,
    typer.Option(help="a sweep of adapters: played in one run against one run per checkpoint (time, peak RSS)"),
]
ScenarioOption = Annotated[str, typer.Option(help="--adapters: the scenario played")]
LimitOption = Annotated[int, typer.Option(min=1, help="--adapters: instances per game or family")]
ScalingOption = Annotated[
    str | None,
    typer.Option(
        help="the end-to-end workload alone at these conversation counts (e.g. 16,64,256), each point a "
        "fresh process (wall time, tokens/s, prefilled/distinct, peak RSS)"
    ),
]
ConversationsOption = Annotated[
    int | None, typer.Option(min=1, help="the end-to-end workload's conversations (default: the plan's)")
]
TurnsOption = Annotated[int | None, typer.Option(min=1, help="its turns per conversation (default: the plan's)")]
RepeatsOption = Annotated[
    int | None, typer.Option(min=1, help="runs of each decode point, the median kept (default: the plan's)")
]


def bench(
    quick: QuickOption = False,
    backend: BackendOption = "llama_cpp",
    model: ModelOption = None,
    panel: PanelOption = None,
    out: OutOption = Path("bench_results"),
    skip_stateless: SkipStatelessOption = False,
    decode_only: DecodeOnlyOption = False,
    adapters: AdaptersOption = None,
    scenario: ScenarioOption = "clembench",
    limit: LimitOption = 6,
    scaling: ScalingOption = None,
    conversations: ConversationsOption = None,
    turns: TurnsOption = None,
    repeats: RepeatsOption = None,
    db: DbOption = None,
    models: ModelsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Engine vs raw decode loop, appliance vs sequential baselines, scoring, memory; writes bench_results/."""
    catalog = load_models(models)
    sizes = {"conversations": conversations, "turns": turns, "repeats": repeats}
    resized = {field: value for field, value in sizes.items() if value is not None}
    say = (lambda text: None) if as_json else console.print
    if adapters is not None:
        from appliance.bench.adapters import run_adapter_bench, write_adapter_bench

        adapter_bench = run_adapter_bench(catalog, adapters, scenario, limit)
        _say_written(adapter_bench, write_adapter_bench(adapter_bench, out), as_json)
    elif scaling is not None:
        if conversations is not None:
            raise ApplianceError("--conversations: with --scaling, the conversation counts are --scaling's")
        _bench_scaling(catalog, scaling, load_panel(panel or "default", catalog), model, _bench_plan(quick, resized),
                       out=out, as_json=as_json, say=say)  # fmt: skip
    elif backend != "llama_cpp":
        chosen = None if panel is None else load_panel(panel, catalog)
        _bench_other_backend(catalog, backend, model, chosen, quick=quick, resized=resized,
                             stateless=not skip_stateless, out=out, as_json=as_json)  # fmt: skip
    elif decode_only:
        from appliance.bench.suite import run_decode_bench, write_decode_outputs

        decode = run_decode_bench(
            catalog, model or "smollm2-135m", quick=quick, plan=_bench_plan(quick, resized), say=say
        )
        _say_written(decode, write_decode_outputs(decode, out), as_json)
    else:
        _bench_suite(catalog, load_panel(panel or "default", catalog), _bench_plan(quick, resized), quick=quick,
                     stateless=not skip_stateless, db=db, out=out, as_json=as_json, say=say)  # fmt: skip


def _bench_scaling(
    catalog: Catalog,
    scaling: str,
    panel: Panel,
    model: str | None,
    plan: BenchPlan,
    *,
    out: Path,
    as_json: bool,
    say: Callable[[str], None],
) -> None:
    from appliance.bench.scaling import parse_sizes, run_scaling_bench, write_scaling_bench

    scaling_bench = run_scaling_bench(
        catalog, panel, parse_sizes(scaling), player=model or plan.model, turns=plan.turns, seed=plan.seed, say=say
    )
    _say_written(scaling_bench, write_scaling_bench(scaling_bench, out), as_json)


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


def _bench_plan(quick: bool, resized: dict[str, int]) -> BenchPlan:
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
    model: str | None,
    panel: Panel | None,
    *,
    quick: bool,
    resized: dict[str, int],
    stateless: bool,
    out: Path,
    as_json: bool,
) -> None:
    from appliance.bench.backend_bench import BackendBenchPlan, run_backend_bench, write_backend_outputs

    if backend not in ("transformers", "vllm"):
        raise ApplianceError(f"--backend: unknown backend '{backend}' (llama_cpp, transformers or vllm)")
    if model is None:
        raise ApplianceError(f"--model: name the {backend} model to measure (a models.toml entry)")
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
