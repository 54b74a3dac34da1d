"""`appliance`: run, report, export, models, scenarios, import.

Exit codes: 0 success, 1 a regression gate failed, 2 bad input or
configuration (one line on stderr, no traceback), 3 a run's store lacks what its journal holds and
could not be restored, 130 interrupted.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import BaseModel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from appliance.offline import enforce_offline

enforce_offline()

from appliance.calibration.apply import unapplied_calibrations  # noqa: E402
from appliance.catalog import Catalog, locate_model_file  # noqa: E402
from appliance.cli.adapter import adapter_app  # noqa: E402
from appliance.cli.compare import compare  # noqa: E402
from appliance.cli.imports import add_import_commands  # noqa: E402
from appliance.cli.judging import calibrate, labels_app, score  # noqa: E402
from appliance.cli.options import (  # noqa: E402
    DbOption,
    JsonOption,
    ModelsOption,
    PanelOption,
    console,
    error_console,
    load_models,
    load_panel,
    split_values,
)
from appliance.cli.store import merge, report_store_check, store_app  # noqa: E402
from appliance.cli.view import view  # noqa: E402
from appliance.cluster import ClusterOptions  # noqa: E402
from appliance.errors import ApplianceError, first_line  # noqa: E402
from appliance.interrupts import INTERRUPTED_EXIT, RunInterrupted, StopRequest, graceful_interrupts  # noqa: E402
from appliance.judging.panels import Panel  # noqa: E402
from appliance.paths import project_root  # noqa: E402
from appliance.planning import DEFAULT_LIMIT, RunRequest, plan_run, quick_suite_note  # noqa: E402
from appliance.run_config import RunConfig  # noqa: E402
from appliance.runner import Runner, RunSummary, instances_for_run  # noqa: E402
from appliance.scenarios import GenerateRequest, ScenarioReport, build_scenario_report, load_family  # noqa: E402
from appliance.scenarios.registry import families as registered_families  # noqa: E402
from appliance.scenarios.registry import family_entry  # noqa: E402
from appliance.store import EpisodeRecord, Store  # noqa: E402
from appliance.worker_groups import parse_group_sizes  # noqa: E402

if TYPE_CHECKING:
    from appliance.bench.suite import BenchPlan

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Offline LLM evaluation appliance.")
models_app = typer.Typer(no_args_is_help=True, help="The models of models.toml.")
scenarios_app = typer.Typer(no_args_is_help=True, help="Scenario families and their instances.")
import_app = typer.Typer(no_args_is_help=True, help="Import other systems' formats.")
app.add_typer(models_app, name="models")
app.add_typer(scenarios_app, name="scenarios")
app.add_typer(import_app, name="import")
app.add_typer(labels_app, name="labels")
app.add_typer(store_app, name="store")
app.add_typer(adapter_app, name="adapter")
app.command()(calibrate)
app.command()(compare)
app.command()(merge)
app.command()(score)
app.command()(view)


@app.command()
def run(
    scenario: Annotated[
        list[str] | None,
        typer.Option("--scenario", help="scenario families (default: a quick suite of every family)"),
    ] = None,
    players: Annotated[list[str] | None, typer.Option("--players", help="models under test (comma-separated)")] = None,
    interrogator: Annotated[
        str | None, typer.Option(help="model playing the user (PingPong's interrogator, SimulBench's user agent)")
    ] = None,
    simulator: Annotated[
        str | None,
        typer.Option(
            help="SimulBench: the fixed model the user agent talks to (default: models.toml's defaults.simulator)"
        ),
    ] = None,
    turns: Annotated[int | None, typer.Option(min=1, help="cap on conversation turns per episode")] = None,
    panel: PanelOption = "default",
    seed: Annotated[int, typer.Option(help="run seed: instance sample and every request's seed")] = 0,
    limit: Annotated[
        int | None,
        typer.Option(
            min=1,
            help=f"instances per scenario (default {DEFAULT_LIMIT} or the family's own, e.g. clembench 10 per game "
            "row; the quick suite: each family's own)",
        ),
    ] = None,
    all_instances: Annotated[bool, typer.Option("--all", help="every instance (overrides --limit)")] = False,
    parallel: Annotated[int, typer.Option(min=1, help="episodes live at once")] = 8,
    resume: Annotated[str | None, typer.Option(help="resume a stored run by id (its config is reused)")] = None,
    cross_play: Annotated[
        bool, typer.Option("--cross-play", help="two-player games also pair every two players, in both roles")
    ] = False,
    exclude_self_judging: Annotated[
        bool,
        typer.Option(
            "--exclude-self-judging",
            help="leave out a judge's verdicts on its own model's outputs (the other judges score that player)",
        ),
    ] = False,
    unsafe_code_execution: Annotated[
        bool,
        typer.Option(
            "--unsafe-code-execution",
            help="run model-written code (DeepEval's code review) even where the kernel cannot isolate it "
            "(no bubblewrap or no user namespaces); the run records it and its report says so",
        ),
    ] = False,
    shard: Annotated[
        str | None,
        typer.Option(
            help="I/N: play a deterministic 1/N of the plan into this store (Slurm arrays); join the N stores "
            "with 'appliance merge'"
        ),
    ] = None,
    run_id: Annotated[
        str | None,
        typer.Option("--run-id", help="name the run (default: a timestamp; shards: one id from the plan)"),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="play the episodes on Ray workers: 'local' (a cluster of this machine), 'auto' (the cluster "
            "this machine is in) or HOST:PORT; the driver alone writes the store",
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            min=1, help="--ray: episode workers, each holding every model of the run that no worker group hosts"
        ),
    ] = 2,
    worker_cpus: Annotated[float, typer.Option(min=0.1, help="--ray: CPUs per worker (its llama.cpp threads)")] = 1.0,
    worker_gpus: Annotated[float, typer.Option(min=0.0, help="--ray: GPUs per worker")] = 0.0,
    worker_group: Annotated[
        list[str] | None,
        typer.Option(
            help="--ray: NAME=COUNT workers for a worker group of models.toml (its models are loaded there only, "
            "and every episode worker sends them its requests; default 1 each)"
        ),
    ] = None,
    db: DbOption = None,
    models: ModelsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run a suite of episodes, store everything, print each family's report."""
    catalog = load_models(models if models is not None or resume is None else _stored_models_file(db, resume))
    with Store.open(db) as store:
        if resume is None:
            request = RunRequest(
                scenarios=split_values(scenario),
                players=split_values(players),
                interrogator=interrogator,
                simulator=simulator,
                turns=turns,
                panel=panel,
                seed=seed,
                limit=limit,
                all_instances=all_instances,
                parallel=parallel,
                cross_play=cross_play,
                exclude_self_judging=exclude_self_judging,
                unsafe_code_execution=unsafe_code_execution,
                shard=shard,
            )
            config = plan_run(request, catalog, registered_families())
        else:
            config = store.run(resume).run_config()
        families = [load_family(name, seed=config.seed, store=store) for name in config.scenarios]
        cluster = (
            None
            if ray is None
            else ClusterOptions(ray, workers, worker_cpus, worker_gpus, parse_group_sizes(worker_group or []))
        )
        try:
            with graceful_interrupts(StopRequest()) as stop:
                runner = Runner(catalog, store, stop=stop, cluster=cluster, on_worker=_worker_ready)
                summary = _execute_with_progress(runner, config, families, resume, run_id, quiet=as_json)
        except RunInterrupted as interrupted:
            stored = len(store.finished_episode_ids(interrupted.run_id))
            error_console.print(
                f"interrupted: {stored} finished episodes of run {interrupted.run_id} are stored; resume with: "
                f"appliance run --resume {interrupted.run_id} --db {store.path}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(INTERRUPTED_EXIT) from None
        reports = [build_scenario_report(store, summary.run_id, name) for name in config.scenarios]
        stale = unapplied_calibrations(store, config.panel, families)
    if as_json:
        print(json.dumps({"summary": asdict(summary), "leaderboards": [r.model_dump() for r in reports]}, default=str))
        report_store_check(summary.store_check)
        return
    _print_run_summary(reports, summary, store.path, config)
    report_store_check(summary.store_check)
    for template, ids in stale.items():
        error_console.print(
            f"not applied: calibration {', '.join(ids)} of panel '{config.panel.name}' was fitted for another version "
            f"of judges/{template}.toml (recalibrate: appliance calibrate --panel {config.panel.name} --template "
            f"{template})",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _worker_ready(name: str, pid: int) -> None:
    error_console.print(f"Ray worker {name} ready (pid {pid})", markup=False, highlight=False)


def _stored_models_file(db: Path | None, run_id: str) -> Path:
    """The models file a run started with: `--resume` reads it unless told --models."""
    with Store.open(db, read_only=True) as store:
        return Path(store.run(run_id).run_config().models_file)


def _execute_with_progress(
    runner: Runner, config: RunConfig, families: list[Any], resume: str | None, run_id: str | None, *, quiet: bool
) -> RunSummary:
    """The run with a progress bar on a terminal (episodes done of planned, failures named)."""
    with Progress(
        TextColumn("[bold]episodes"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=error_console,
        disable=quiet or not error_console.is_terminal,
    ) as progress:
        task = progress.add_task("loading models", total=None)

        # Without a terminal (a log file, a nightly job) progress is one plain line per event instead.
        plain = not quiet and not error_console.is_terminal
        done = [0]
        playing_since = [time.monotonic()]

        def planned(run_id: str, count: int) -> None:
            playing_since[0] = time.monotonic()
            progress.update(task, total=count, description=f"run {run_id}")
            if plain:
                error_console.print(f"run {run_id}: {count} episodes to play", markup=False, highlight=False)

        def episode_done(record: EpisodeRecord) -> None:
            # on a cluster, each worker's share and pace so far: a slow or idle worker shows
            minutes = max(time.monotonic() - playing_since[0], 1e-6) / 60
            paces = [f"{name} {n} ({n / minutes:.1f}/min)" for name, n in runner.played_by_worker().items()]
            pace = f" - {', '.join(paces)}" if paces else ""
            note = pace if record.status == "finished" else f"[red]{record.instance_id}: {record.error}"
            progress.update(task, advance=1, description=note)
            done[0] += 1
            if plain:
                state = record.status if record.error is None else f"{record.status}: {record.error}"
                error_console.print(
                    f"episode {done[0]} done: {record.scenario} {record.instance_id} {record.player} ({state}){pace}",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )

        if resume is not None:
            return runner.resume(resume, on_episode=episode_done, on_plan=planned)
        return runner.execute(config, families, run_id=run_id, on_episode=episode_done, on_plan=planned)


def _print_run_summary(reports: list[ScenarioReport], summary: RunSummary, db: Path, config: RunConfig) -> None:
    for scenario_report in reports:
        scenario_report.render(console)
    if config.quick:
        console.print(quick_suite_note(config, registered_families()))
    cached = summary.cached_prompt_tokens / summary.prompt_tokens if summary.prompt_tokens else 0.0
    console.print(
        f"Run {summary.run_id}: {summary.episodes_finished} episodes finished, {summary.episodes_failed} failed, "
        f"{summary.episodes_skipped} already stored; {summary.wall_s:.1f} s; "
        f"{summary.completion_tokens} tokens generated, {cached:.0%} of prompt tokens served from KV cache."
    )
    if summary.workers:
        shares = ", ".join(f"{name} {count}" for name, count in summary.workers.items())
        lost = (
            f" Lost (their episodes replayed elsewhere): {', '.join(summary.lost_workers)}."
            if summary.lost_workers
            else ""
        )
        console.print(f"Episodes per Ray worker: {shares}.{lost}")
    console.print(f"Results stored in {db.resolve()} (run id {summary.run_id}).")


@app.command()
def report(
    run_id: Annotated[str | None, typer.Argument(help="run id (default: the latest run)")] = None,
    panel: Annotated[str | None, typer.Option(help="whose scores to show (default: the run's panel)")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print the leaderboard of a stored run with 95% bootstrap intervals."""
    with Store.open(db, read_only=True) as store:
        resolved = store.resolve_run_id(run_id)
        record = store.run(resolved)
        if record.status == "running":
            finished, failed, planned = store.progress(resolved)
            (error_console if as_json else console).print(
                f"run {resolved} running: {finished + failed} of {planned if planned is not None else '?'} episodes "
                f"stored ({failed} failed) so far; the figures below are partial. A run that was killed also "
                f"shows this: resume it with appliance run --resume {resolved}",
                markup=False,
                highlight=False,
            )
        reports = [build_scenario_report(store, resolved, name, panel) for name in record.scenarios]
    if as_json:
        print(json.dumps([scenario_report.model_dump() for scenario_report in reports], default=str))
        return
    for scenario_report in reports:
        scenario_report.render(console)


@app.command()
def export(
    run_id: Annotated[str | None, typer.Argument(help="run id (default: the latest run)")] = None,
    export_format: Annotated[str, typer.Option("--format", help="parquet | jsonl | csv")] = "parquet",
    out: Annotated[Path | None, typer.Option(help="folder to write (default: ./export-RUN_ID)")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write a run's episodes, messages, judgments and scores as files with stable column names."""
    from appliance.store.export import export_run

    with Store.open(db, read_only=True) as store:
        resolved = store.resolve_run_id(run_id)
        folder = out or Path(f"export-{resolved}")
        written = export_run(store, resolved, folder, export_format)
    if as_json:
        print(json.dumps([{"table": f.table, "path": str(f.path), "rows": f.rows} for f in written]))
        return
    for exported in written:
        console.print(f"{exported.table}: {exported.rows} rows -> {exported.path}")
    console.print(f"run record -> {folder / 'run.json'}")


@app.command()
def bench(
    quick: Annotated[bool, typer.Option("--quick", help="smaller workloads (a few minutes)")] = False,
    backend: Annotated[
        str, typer.Option(help="llama_cpp (the full suite), or transformers / vllm (decode and prefill)")
    ] = "llama_cpp",
    model: Annotated[
        str | None, typer.Option(help="the model to measure (transformers/vllm: required; may be synthetic)")
    ] = None,
    panel: Annotated[
        str | None,
        typer.Option(
            help="the end-to-end workload's judges (llama_cpp: 'default'; transformers/vllm: the model alone)"
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="folder for the JSON and markdown results")] = Path("bench_results"),
    skip_stateless: Annotated[
        bool, typer.Option("--skip-stateless", help="leave out the end-to-end arm that reuses nothing (the slowest)")
    ] = False,
    decode_only: Annotated[
        bool,
        typer.Option(
            "--decode-only",
            help="llama_cpp: the decode workload alone, for --model (a GPU-offloaded or synthetic GGUF entry)",
        ),
    ] = False,
    adapters: Annotated[
        str | None,
        typer.Option(help="a sweep of adapters: played in one run against one run per checkpoint (time, peak RSS)"),
    ] = None,
    scenario: Annotated[str, typer.Option(help="--adapters: the scenario played")] = "clembench",
    limit: Annotated[int, typer.Option(min=1, help="--adapters: instances per game or family")] = 6,
    scaling: Annotated[
        str | None,
        typer.Option(
            help="the end-to-end workload alone at these conversation counts (e.g. 16,64,256), each point a "
            "fresh process (wall time, tokens/s, prefilled/distinct, peak RSS)"
        ),
    ] = None,
    conversations: Annotated[
        int | None, typer.Option(min=1, help="the end-to-end workload's conversations (default: the plan's)")
    ] = None,
    turns: Annotated[int | None, typer.Option(min=1, help="its turns per conversation (default: the plan's)")] = None,
    repeats: Annotated[
        int | None, typer.Option(min=1, help="runs of each decode point, the median kept (default: the plan's)")
    ] = None,
    db: DbOption = None,
    models: ModelsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Engine vs raw decode loop, appliance vs sequential baselines, scoring, memory; writes bench_results/."""
    catalog = load_models(models)
    sizes = {"conversations": conversations, "turns": turns, "repeats": repeats}
    resized = {field: value for field, value in sizes.items() if value is not None}
    if adapters is not None:
        from appliance.bench.adapters import run_adapter_bench, write_adapter_bench

        adapter_bench = run_adapter_bench(catalog, adapters, scenario, limit)
        _say_written(adapter_bench, write_adapter_bench(adapter_bench, out), as_json)
        return
    if scaling is not None:
        from appliance.bench.scaling import parse_sizes, run_scaling_bench, write_scaling_bench

        if conversations is not None:
            raise ApplianceError("--conversations: with --scaling, the conversation counts are --scaling's")
        plan = _bench_plan(quick, resized)
        scaling_bench = run_scaling_bench(
            catalog,
            load_panel(panel or "default", catalog),
            parse_sizes(scaling),
            player=model or plan.model,
            turns=plan.turns,
            seed=plan.seed,
            say=(lambda text: None) if as_json else console.print,
        )
        _say_written(scaling_bench, write_scaling_bench(scaling_bench, out), as_json)
        return
    if backend != "llama_cpp":
        chosen = None if panel is None else load_panel(panel, catalog)
        _bench_other_backend(
            catalog,
            backend,
            model,
            chosen,
            quick=quick,
            resized=resized,
            stateless=not skip_stateless,
            out=out,
            as_json=as_json,
        )
        return
    if decode_only:
        from appliance.bench.suite import run_decode_bench, write_decode_outputs

        decode_report = run_decode_bench(
            catalog,
            model or "smollm2-135m",
            quick=quick,
            plan=_bench_plan(quick, resized),
            say=(lambda text: None) if as_json else console.print,
        )
        _say_written(decode_report, write_decode_outputs(decode_report, out), as_json)
        return
    from appliance.bench.suite import run_bench, write_outputs

    chosen = load_panel(panel or "default", catalog)
    with Store.open(db) as store:  # opened first: a bad --db fails before minutes of work
        report = run_bench(
            catalog,
            chosen,
            quick=quick,
            plan=_bench_plan(quick, resized),
            stateless=not skip_stateless,
            say=(lambda text: None) if as_json else console.print,
        )
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


@models_app.command("list")
def models_list(models: ModelsOption = None, as_json: JsonOption = False) -> None:
    """Name, backend, file, size and presence of every model."""
    catalog = load_models(models)
    rows = []
    for spec in catalog.models.values():
        try:
            path: Path | None = locate_model_file(spec, catalog.source.parent, assemble=False)
        except ApplianceError:  # not installed, or a synthetic model (no file)
            path = None
        present = spec.synthetic is not None or (path is not None and path.exists())
        adapter = catalog.resolve_adapter(spec)
        present = present and (adapter is None or adapter.exists())
        size = path.stat().st_size if present and path is not None and path.is_file() else None
        rows.append(
            {
                "name": spec.name,
                "backend": spec.backend,
                "source": spec.describe_source(),
                "file": str(path) if path is not None else None,
                "size_mb": None if size is None else round(size / 1e6, 1),
                "present": present,
                "note": "" if present or not spec.assemble else "assembled from its package on first use",
            }
        )
    if as_json:
        print(json.dumps(rows))
        return
    table = Table(title=f"models in {catalog.source}", title_justify="left")
    for column in ("name", "backend", "source", "file", "size MB", "present"):
        table.add_column(column)
    for row in rows:
        shown = "yes" if row["present"] else f"no {row['note']}".strip()
        table.add_row(
            str(row["name"]),
            str(row["backend"]),
            str(row["source"]),
            str(row["file"] or "-"),
            "-" if row["size_mb"] is None else str(row["size_mb"]),
            shown,
        )
    console.print(table)


@models_app.command("check")
def models_check(
    name: Annotated[str, typer.Argument(help="model name from models.toml")],
    tokens: Annotated[int, typer.Option(min=1, max=512, help="tokens to generate")] = 16,
    models: ModelsOption = None,
) -> None:
    """Load a model and generate a few tokens."""
    from appliance.engine.factory import open_backend
    from appliance.engine.types import GenerationRequest, Message, ResolvedSampling

    catalog = load_models(models)
    spec = catalog.get(name)
    started = time.perf_counter()
    backend = open_backend(catalog, spec, parallel=1)
    loaded = time.perf_counter() - started
    try:
        request = GenerationRequest(
            messages=(Message(role="user", content="Name three colours."),),
            sampling=ResolvedSampling(temperature=0.0, max_tokens=tokens),
        )
        backend.submit(request)
        results = []
        while backend.busy:
            results.extend(backend.step())
    finally:
        backend.close()
    completion = results[0][1]
    source = spec.describe_source() if spec.synthetic is not None else catalog.resolve_path(spec)
    if spec.adapter is not None:
        source = f"{source} with LoRA {catalog.resolve_adapter(spec)} (scale {spec.adapter_scale:g})"
    console.print(f"model '{name}' loaded in {loaded:.2f} s from {source}")
    console.print(
        f"generated {completion.completion_tokens} tokens in {completion.latency_s:.2f} s "
        f"({completion.finish_reason}): {completion.text!r}"
    )


@scenarios_app.command("list")
def scenarios_list(as_json: JsonOption = False) -> None:
    """Scenario families and their instance counts."""
    rows: list[dict[str, Any]] = []
    for entry in registered_families():
        family = load_family(entry.name)
        instances = family.stages()[0].instances()
        languages = sorted({instance.language for instance in instances})
        rows.append(
            {
                "name": entry.name,
                "instances": len(instances),
                "default_run": len(instances_for_run(family, entry.default_limit or DEFAULT_LIMIT, 0)),
                "quick_suite": len(instances_for_run(family, entry.quick_limit, 0)),
                "languages": languages,
                "description": entry.description,
            }
        )
    if as_json:
        print(json.dumps(rows))
        return
    table = Table(title=f"scenario families in {project_root() / 'scenarios'}", title_justify="left")
    for column in ("name", "instances", "default run", "in quick suite", "languages", "description"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            str(row["name"]),
            str(row["instances"]),
            str(row["default_run"]),
            str(row["quick_suite"]),
            ", ".join(map(str, row["languages"])),
            str(row["description"]),
        )
    console.print(table)


@scenarios_app.command("generate")
def scenarios_generate(
    family: Annotated[str, typer.Argument(help="the family whose instances to generate (clembench)")],
    seed: Annotated[int, typer.Option(help="generator seed")] = 0,
    per_experiment: Annotated[int, typer.Option(min=1, help="instances per experiment of each game")] = 6,
    out: Annotated[Path | None, typer.Option(help="write a JSON file instead of storing the set")] = None,
    name: Annotated[str | None, typer.Option(help="the stored set's name (default: FAMILY-seed-SEED)")] = None,
    games: Annotated[list[str] | None, typer.Option("--games", help="only these games (comma-separated)")] = None,
    db: DbOption = None,
) -> None:
    """Generate a fresh instance set from a seed; play it with --scenario FAMILY:FILE or FAMILY:NAME."""
    entry = family_entry(family)
    if entry.generate is None:
        generated = [e.name for e in registered_families() if e.generate is not None]
        raise ApplianceError(
            f"scenario '{family}': only {', '.join(generated)} generate instances (its data is fixed otherwise)"
        )
    for line in entry.generate(GenerateRequest(seed, per_experiment, out, name, db, tuple(split_values(games)))):
        console.print(line)


def main() -> None:
    try:
        add_import_commands(import_app)  # finding the families' importers can fail on a bad $APPLIANCE_FAMILIES
        code = app(standalone_mode=False)  # click returns an Exit's code here instead of raising it
        if isinstance(code, int) and code:
            sys.exit(code)
    except ApplianceError as error:
        error_console.print(f"error: {error}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        error_console.print("interrupted: finished episodes are stored; resume with --resume RUN_ID")
        sys.exit(INTERRUPTED_EXIT)
    except typer.Exit as exit_:
        sys.exit(exit_.exit_code)
    except typer.Abort:
        sys.exit(130)
    except Exception as error:  # click usage errors carry their own exit code
        import click

        if isinstance(error, click.ClickException):
            error.show()
            sys.exit(error.exit_code)
        if type(error).__module__.startswith("duckdb"):  # a block failed its checksum mid-command
            error_console.print(
                f"error: the store could not be read ({first_line(error)}); check it with 'appliance store check' "
                "and rebuild it from its journal with 'appliance store repair' (both take --db)",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
