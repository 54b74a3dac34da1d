"""`appliance run`: plan or resume a run, play it with a progress bar, print each family's report."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from appliance.calibration.apply import unapplied_calibrations
from appliance.catalog.models import Catalog
from appliance.cli.options import (
    DbOption,
    JsonOption,
    ModelsOption,
    PanelOption,
    console,
    error_console,
    load_models,
    split_values,
)
from appliance.cli.store import report_store_check
from appliance.cluster.ray_cluster import ClusterOptions
from appliance.cluster.worker_groups import parse_group_sizes
from appliance.run.interrupts import INTERRUPTED_EXIT, RunInterrupted, StopRequest, graceful_interrupts
from appliance.run.planning import DEFAULT_LIMIT, RunRequest, parse_family_options, plan_run, quick_suite_note
from appliance.run.runner import Runner, RunSummary
from appliance.run_config import RunConfig
from appliance.scenarios import ScenarioReport, build_scenario_report, load_run_family
from appliance.scenarios.registry import families as registered_families
from appliance.store import EpisodeRecord, Store

ScenarioOption = Annotated[
    list[str] | None,
    typer.Option("--scenario", help="scenario families (default: a quick suite of every family)"),
]
PlayersOption = Annotated[list[str] | None, typer.Option("--players", help="models under test (comma-separated)")]
InterrogatorOption = Annotated[
    str | None, typer.Option(help="model playing the user (PingPong's interrogator, SimulBench's user agent)")
]
SimulatorOption = Annotated[
    str | None,
    typer.Option(
        help="SimulBench: the fixed model the user agent talks to (default: models.toml's defaults.simulator)"
    ),
]
TurnsOption = Annotated[int | None, typer.Option(min=1, help="cap on conversation turns per episode")]
SeedOption = Annotated[int, typer.Option(help="run seed: instance sample and every request's seed")]
LimitOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        help=f"instances per scenario (default {DEFAULT_LIMIT} or the family's own, e.g. clembench 10 per game "
        "row; the quick suite: each family's own)",
    ),
]
AllInstancesOption = Annotated[bool, typer.Option("--all", help="every instance (overrides --limit)")]
ParallelOption = Annotated[int, typer.Option(min=1, help="episodes live at once")]
ResumeOption = Annotated[str | None, typer.Option(help="resume a stored run by id (its config is reused)")]
CrossPlayOption = Annotated[
    bool, typer.Option("--cross-play", help="two-player games also pair every two players, in both roles")
]
ExcludeSelfJudgingOption = Annotated[
    bool,
    typer.Option(
        "--exclude-self-judging",
        help="leave out a judge's verdicts on its own model's outputs (the other judges score that player)",
    ),
]
UnsafeCodeExecutionOption = Annotated[
    bool,
    typer.Option(
        "--unsafe-code-execution",
        help="run model-written code (DeepEval's code review) even where the kernel cannot isolate it "
        "(no bubblewrap or no user namespaces); the run records it and its report says so",
    ),
]
FamilyOptionsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="a family's own option, NAME.KEY=VALUE (repeatable; each family declares and checks its own)",
    ),
]
ShardOption = Annotated[
    str | None,
    typer.Option(
        help="I/N: play a deterministic 1/N of the plan into this store (Slurm arrays); join the N stores "
        "with 'appliance merge'"
    ),
]
RunIdOption = Annotated[
    str | None,
    typer.Option("--run-id", help="name the run (default: a timestamp; shards: one id from the plan)"),
]
RayOption = Annotated[
    str | None,
    typer.Option(
        "--ray",
        help="play the episodes on Ray workers: 'local' (a cluster of this machine), 'auto' (the cluster "
        "this machine is in) or HOST:PORT; the driver alone writes the store",
    ),
]
WorkersOption = Annotated[
    int,
    typer.Option(min=1, help="--ray: episode workers, each holding every model of the run that no worker group hosts"),
]
WorkerCpusOption = Annotated[float, typer.Option(min=0.1, help="--ray: CPUs per worker (its llama.cpp threads)")]
WorkerGpusOption = Annotated[float, typer.Option(min=0.0, help="--ray: GPUs per worker")]
WorkerGroupOption = Annotated[
    list[str] | None,
    typer.Option(
        help="--ray: NAME=COUNT workers for a worker group of models.toml (its models are loaded there only, "
        "and every episode worker sends them its requests; default 1 each)"
    ),
]


def run(
    scenario: ScenarioOption = None,
    players: PlayersOption = None,
    interrogator: InterrogatorOption = None,
    simulator: SimulatorOption = None,
    turns: TurnsOption = None,
    panel: PanelOption = "default",
    seed: SeedOption = 0,
    limit: LimitOption = None,
    all_instances: AllInstancesOption = False,
    parallel: ParallelOption = 8,
    resume: ResumeOption = None,
    cross_play: CrossPlayOption = False,
    exclude_self_judging: ExcludeSelfJudgingOption = False,
    unsafe_code_execution: UnsafeCodeExecutionOption = False,
    shard: ShardOption = None,
    family_options: FamilyOptionsOption = None,
    run_id: RunIdOption = None,
    ray: RayOption = None,
    workers: WorkersOption = 2,
    worker_cpus: WorkerCpusOption = 1.0,
    worker_gpus: WorkerGpusOption = 0.0,
    worker_group: WorkerGroupOption = None,
    db: DbOption = None,
    models: ModelsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run a suite of episodes, store everything, print each family's report."""
    catalog = load_models(models if models is not None or resume is None else _stored_models_file(db, resume))
    with Store.open(db) as store:
        if resume is None:
            request = RunRequest(
                scenarios=split_values(scenario), players=split_values(players), interrogator=interrogator,
                simulator=simulator, turns=turns, panel=panel, seed=seed, limit=limit, all_instances=all_instances,
                parallel=parallel, cross_play=cross_play, exclude_self_judging=exclude_self_judging,
                unsafe_code_execution=unsafe_code_execution, shard=shard,
                family_options=parse_family_options(family_options or []),
            )  # fmt: skip
            config = plan_run(request, catalog, registered_families())
        else:
            config = store.run(resume).run_config()
        families = [load_run_family(name, config, store) for name in config.scenarios]
        groups = parse_group_sizes(worker_group or [])
        cluster = None if ray is None else ClusterOptions(ray, workers, worker_cpus, worker_gpus, groups)
        summary = _play(store, catalog, config, families, cluster, resume, run_id, quiet=as_json)
        reports = [build_scenario_report(store, summary.run_id, name) for name in config.scenarios]
        stale = unapplied_calibrations(store, config.panel, families)
    if as_json:
        print(json.dumps({"summary": asdict(summary), "leaderboards": [r.model_dump() for r in reports]}, default=str))
        report_store_check(summary.store_check)
        return
    _print_run_summary(reports, summary, store.path, config)
    report_store_check(summary.store_check)
    _say_stale_calibrations(stale, config)


def _play(
    store: Store,
    catalog: Catalog,
    config: RunConfig,
    families: list[Any],
    cluster: ClusterOptions | None,
    resume: str | None,
    run_id: str | None,
    *,
    quiet: bool,
) -> RunSummary:
    """The run, stopped cleanly on Ctrl-C: what finished is stored and the resume command printed."""
    try:
        with graceful_interrupts(StopRequest()) as stop:
            runner = Runner(catalog, store, stop=stop, cluster=cluster, on_worker=_worker_ready)
            return _execute_with_progress(runner, config, families, resume, run_id, quiet=quiet)
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


def _say_stale_calibrations(stale: dict[str, list[str]], config: RunConfig) -> None:
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
    unfit = summary.episodes_not_fitting
    console.print(
        f"Run {summary.run_id}: {summary.episodes_finished} episodes finished, {summary.episodes_failed} failed"
        + (f" ({unfit} of them did not fit their model's context)" if unfit else "")
        + ", "
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
