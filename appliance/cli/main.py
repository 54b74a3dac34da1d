"""`appliance`: run, report, models, scenarios, import.

Exit codes: 0 success, 1 a regression gate failed, 2 bad input or
configuration (one line on stderr, no traceback), 130 interrupted.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from appliance.offline import enforce_offline

enforce_offline()

from appliance.catalog import locate_model_file  # noqa: E402
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
from appliance.cli.render import print_report  # noqa: E402
from appliance.errors import ApplianceError  # noqa: E402
from appliance.judging.panels import get_panel  # noqa: E402
from appliance.paths import judges_dir, project_root, scenarios_dir  # noqa: E402
from appliance.report import build_scenario_report  # noqa: E402
from appliance.runner import RunConfig, Runner, first_stage, instances_for_run, support_models  # noqa: E402
from appliance.scenarios import family_names, load_family  # noqa: E402
from appliance.scenarios.clembench.instances import InstanceSet  # noqa: E402
from appliance.store import EpisodeRecord, Store  # noqa: E402

DEFAULT_SUITE_LIMIT = 6

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Offline LLM evaluation appliance.")
models_app = typer.Typer(no_args_is_help=True, help="The models of models.toml.")
scenarios_app = typer.Typer(no_args_is_help=True, help="Scenario families and their instances.")
import_app = typer.Typer(no_args_is_help=True, help="Import other systems' formats.")
app.add_typer(models_app, name="models")
app.add_typer(scenarios_app, name="scenarios")
app.add_typer(import_app, name="import")
app.add_typer(labels_app, name="labels")
app.command()(calibrate)
app.command()(score)


@app.command()
def run(
    scenario: Annotated[
        list[str] | None, typer.Option("--scenario", help="scenario families (default: pingpong)")
    ] = None,
    players: Annotated[list[str] | None, typer.Option("--players", help="models under test (comma-separated)")] = None,
    interrogator: Annotated[
        str | None, typer.Option(help="model playing the user (PingPong's interrogator, SimulBench's user agent)")
    ] = None,
    simulator: Annotated[
        str | None, typer.Option(help="SimulBench: the fixed model the user agent talks to (default: first player)")
    ] = None,
    turns: Annotated[int | None, typer.Option(min=1, help="cap on conversation turns per episode")] = None,
    panel: PanelOption = "default",
    seed: Annotated[int, typer.Option(help="run seed: instance sample and every request's seed")] = 0,
    limit: Annotated[int, typer.Option(min=1, help="instances per scenario")] = DEFAULT_SUITE_LIMIT,
    all_instances: Annotated[bool, typer.Option("--all", help="every instance (overrides --limit)")] = False,
    parallel: Annotated[int, typer.Option(min=1, help="episodes live at once")] = 8,
    resume: Annotated[str | None, typer.Option(help="resume a stored run by id (its config is reused)")] = None,
    cross_play: Annotated[
        bool, typer.Option("--cross-play", help="two-player games also pair every two players, in both roles")
    ] = False,
    db: DbOption = None,
    models: ModelsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run a suite of episodes, store everything, print the leaderboard."""
    catalog = load_models(models)
    with Store.open(db) as store:
        if resume is not None:
            config = RunConfig(**store.run(resume)["config"])
        else:
            player_names = split_values(players) or catalog.defaults.players
            if not player_names:
                raise ApplianceError(f"{catalog.source}: no players given and field 'defaults.players' is empty")
            interrogator_name = interrogator or catalog.defaults.interrogator or player_names[0]
            config = RunConfig(
                scenarios=split_values(scenario) or ["pingpong"],
                players=player_names,
                interrogator=interrogator_name,
                panel=get_panel(judges_dir() / "panels.toml", panel),
                seed=seed,
                limit=None if all_instances else limit,
                parallel=parallel,
                models_file=str(catalog.source),
                cross_play=cross_play,
                simulator=simulator,
                turns=turns,
            )
        for name in [*config.players, config.interrogator, *support_models(config).values(), *config.panel.judges]:
            catalog.get(name)
        families = [load_family(name, seed=config.seed, store=store) for name in config.scenarios]
        runner = Runner(catalog, store)
        with Progress(
            TextColumn("[bold]episodes"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=error_console,
            disable=as_json or not error_console.is_terminal,
        ) as progress:
            task = progress.add_task("loading models", total=None)

            def planned(run_id: str, count: int) -> None:
                progress.update(task, total=count, description=f"run {run_id}")

            def episode_done(record: EpisodeRecord) -> None:
                note = "" if record.status == "finished" else f"[red]{record.instance_id}: {record.error}"
                progress.update(task, advance=1, description=note)

            summary = runner.execute(config, families, resume=resume, on_episode=episode_done, on_plan=planned)
        run_id = summary.run_id
        boards = [build_scenario_report(store, run_id, name) for name in config.scenarios]
    if as_json:
        print(json.dumps({"summary": summary.__dict__, "leaderboards": [b.model_dump() for b in boards]}, default=str))
        return
    for board in boards:
        print_report(console, board)
    cached = summary.cached_prompt_tokens / summary.prompt_tokens if summary.prompt_tokens else 0.0
    console.print(
        f"Run {run_id}: {summary.episodes_finished} episodes finished, {summary.episodes_failed} failed, "
        f"{summary.episodes_skipped} already stored; {summary.wall_s:.1f} s; "
        f"{summary.completion_tokens} tokens generated, {cached:.0%} of prompt tokens served from KV cache."
    )
    console.print(f"Results stored in {store.path.resolve()} (run id {run_id}).")


@app.command()
def report(
    run_id: Annotated[str | None, typer.Argument(help="run id (default: the latest run)")] = None,
    panel: Annotated[str | None, typer.Option(help="whose scores to show (default: the run's panel)")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print the leaderboard of a stored run with 95% bootstrap intervals."""
    with Store.open(db, read_only=True) as store:
        resolved = run_id or store.latest_run_id()
        if resolved is None:
            raise ApplianceError(f"{store.path}: no runs stored yet")
        scenarios = store.run(resolved)["config"]["scenarios"]
        boards = [build_scenario_report(store, resolved, name, panel) for name in scenarios]
    if as_json:
        print(json.dumps([board.model_dump() for board in boards], default=str))
        return
    for board in boards:
        print_report(console, board)


@app.command()
def bench(
    quick: Annotated[bool, typer.Option("--quick", help="smaller workloads (a few minutes)")] = False,
    panel: PanelOption = "default",
    out: Annotated[Path, typer.Option(help="folder for the JSON and markdown results")] = Path("bench_results"),
    db: DbOption = None,
    models: ModelsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Engine vs raw decode loop, appliance vs stateless baseline, memory; writes bench_results/."""
    from appliance.bench.suite import run_bench, write_outputs

    catalog = load_models(models)
    chosen = load_panel(panel, catalog)
    with Store.open(db) as store:  # opened first: a bad --db fails before minutes of work
        report = run_bench(catalog, chosen, quick=quick, say=(lambda text: None) if as_json else console.print)
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


@models_app.command("list")
def models_list(models: ModelsOption = None, as_json: JsonOption = False) -> None:
    """Name, backend, file, size and presence of every model."""
    catalog = load_models(models)
    rows = []
    for spec in catalog.models.values():
        try:
            path: Path | None = locate_model_file(spec, catalog.source.parent, assemble=False)
        except ApplianceError:
            path = None
        present = path is not None and path.exists()
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
    console.print(f"model '{name}' loaded in {loaded:.2f} s from {catalog.resolve_path(spec)}")
    console.print(
        f"generated {completion.completion_tokens} tokens in {completion.latency_s:.2f} s "
        f"({completion.finish_reason}): {completion.text!r}"
    )


@scenarios_app.command("list")
def scenarios_list(as_json: JsonOption = False) -> None:
    """Scenario families and their instance counts."""
    rows = []
    for name in family_names():
        family = load_family(name)
        instances = first_stage(family).instances()
        languages = sorted({instance.language for instance in instances})
        rows.append(
            {
                "name": name,
                "instances": len(instances),
                "default_run": len(instances_for_run(family, DEFAULT_SUITE_LIMIT, 0)),
                "languages": languages,
                "description": family.description,
            }
        )
    if as_json:
        print(json.dumps(rows))
        return
    table = Table(title=f"scenario families in {project_root() / 'scenarios'}", title_justify="left")
    for column in ("name", "instances", "in default run", "languages", "description"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            str(row["name"]),
            str(row["instances"]),
            str(row["default_run"]),
            ", ".join(row["languages"]),  # type: ignore[arg-type]
            str(row["description"]),
        )
    console.print(table)


@scenarios_app.command("generate")
def scenarios_generate(
    family: Annotated[str, typer.Argument(help="the family whose instances to generate (clembench)")],
    seed: Annotated[int, typer.Option(help="generator seed")] = 0,
    per_experiment: Annotated[int, typer.Option(min=1, help="instances per experiment of each game")] = 6,
    out: Annotated[Path | None, typer.Option(help="write a JSON file instead of storing the set")] = None,
    name: Annotated[str | None, typer.Option(help="the stored set's name (default: clembench-seed-SEED)")] = None,
    db: DbOption = None,
) -> None:
    """Generate a fresh instance set from a seed; play it with --scenario clembench:FILE or clembench:NAME."""
    from appliance.scenarios.clembench.generate import generate_instance_set

    if family != "clembench":
        raise ApplianceError(f"scenario '{family}': only clembench generates instances (its data is fixed otherwise)")
    instance_set = generate_instance_set(scenarios_dir() / "clembench", seed, per_experiment)
    if name is not None:
        instance_set.name = name
    _save_instance_set(instance_set, out, db)


def _save_instance_set(instance_set: InstanceSet, out: Path | None, db: Path | None) -> None:
    from appliance.scenarios.clembench.instances import write_instance_set
    from appliance.store.instance_sets import write_instance_set as store_instance_set

    count = len(instance_set.instances)
    if out is not None:
        write_instance_set(instance_set, out)
        console.print(f"wrote {count} instances to {out}; play them with --scenario clembench:{out}")
        return
    with Store.open(db) as store:
        new = store_instance_set(
            store,
            name=instance_set.name,
            family="clembench",
            source=instance_set.source,
            seed=instance_set.seed,
            count=count,
            payload=instance_set.model_dump(mode="json"),
        )
    verb = "stored" if new else "already stored:"
    console.print(f"{verb} {count} instances as '{instance_set.name}'")
    console.print(f"play them with: appliance run --scenario clembench:{instance_set.name}")


@import_app.command("clembench-instances")
def import_clembench_instances(
    path: Annotated[Path, typer.Argument(help="a clembench instances.json, or a folder of <game>/instances.json")],
    out: Annotated[Path | None, typer.Option(help="write a JSON file instead of storing the set")] = None,
    name: Annotated[str | None, typer.Option(help="the stored set's name")] = None,
    db: DbOption = None,
) -> None:
    """Store clembench's published instances as an instance set, to play as they are."""
    from appliance.scenarios.clembench.published import read_published

    if not path.exists():
        raise ApplianceError(f"{path}: not found")
    instance_set = read_published(path, scenarios_dir() / "clembench")
    if name is not None:
        instance_set.name = name
    _save_instance_set(instance_set, out, db)


@import_app.command("clembench-results")
def import_clembench_results(
    path: Annotated[Path, typer.Argument(help="a folder or zip of clembench per-episode scores.json files")],
    db: DbOption = None,
) -> None:
    """Import clembench results as a run; `appliance report RUN` aggregates them like our own."""
    from appliance.scenarios.clembench.results import import_results

    with Store.open(db) as store:
        run_id, episodes, new = import_results(store, path)
    state = "imported" if new else "already imported"
    console.print(f"{state}: {episodes} episodes as run {run_id}; see them with: appliance report {run_id}")


@import_app.command("simulbench-tasks")
def import_simulbench_tasks(
    path: Annotated[Path, typer.Argument(help="SimulBench's simulbench_tasks.jsonl")],
    name: Annotated[str, typer.Option(help="the stored set's name")] = "simulbench-tasks",
    db: DbOption = None,
) -> None:
    """Store SimulBench's published tasks; run all three stages on them with --scenario simulbench:NAME."""
    from appliance.scenarios.simulbench.tasks import read_published_tasks

    task_set = read_published_tasks(path).model_copy(update={"name": name})
    _store_simulbench_set(name, str(path), len(task_set.tasks), task_set.model_dump(mode="json"), "tasks", db)


@import_app.command("simulbench-scripts")
def import_simulbench_scripts(
    path: Annotated[Path, typer.Argument(help="SimulBench's simulbench_all.jsonl (test scripts)")],
    name: Annotated[str, typer.Option(help="the stored set's name")] = "simulbench-scripts",
    db: DbOption = None,
) -> None:
    """Store SimulBench's published test scripts; evaluate them with --scenario simulbench:NAME [--limit N]."""
    from appliance.scenarios.simulbench.scripts import read_published_scripts

    script_set = read_published_scripts(path).model_copy(update={"name": name})
    kinds = Counter(script.kind for script in script_set.scripts)
    summary = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))
    count = len(script_set.scripts)
    _store_simulbench_set(name, str(path), count, script_set.model_dump(mode="json"), f"scripts ({summary})", db)


def _store_simulbench_set(
    name: str, source: str, count: int, payload: dict[str, Any], what: str, db: Path | None
) -> None:
    from appliance.store.instance_sets import write_instance_set

    with Store.open(db) as store:
        new = write_instance_set(
            store, name=name, family="simulbench", source=source, seed=None, count=count, payload=payload
        )
    console.print(f"{'stored' if new else 'already stored:'} {count} {what} as '{name}'")
    console.print(f"run them with: appliance run --scenario simulbench:{name} --limit 5")


@import_app.command("pingpong-settings")
def import_pingpong_settings(
    path: Annotated[Path, typer.Argument(help="PingPong's settings_v2.json")],
    out: Annotated[Path, typer.Option(help="folder for the converted cards and situations")] = Path(
        "imported/pingpong"
    ),
) -> None:
    """Convert PingPong's characters and situations; run them with --scenario pingpong:OUT."""
    from appliance.scenarios.pingpong import import_settings

    cards, situations = import_settings(path, out)
    console.print(f"imported {cards} characters and {situations} situations into {out}")
    console.print(f"run them with: appliance run --scenario pingpong:{out}")


@import_app.command("simulatebench")
def import_simulatebench_profiles(
    path: Annotated[Path, typer.Argument(help="SimulateBench's db folder (profile/ and benchmark_only_QA/)")],
    out: Annotated[Path, typer.Option(help="folder for the converted profiles")] = Path("imported/simulatebench"),
) -> None:
    """Convert SimulateBench's profiles, questions and perturbation variants; run with --scenario simulatebench:OUT."""
    from appliance.scenarios.simulatebench.importer import import_simulatebench

    profiles, questions, skipped = import_simulatebench(path, out)
    console.print(
        f"imported {profiles} profiles with {questions} single-choice questions into {out} "
        f"({skipped} questions skipped: open questions or a gold answer that is not an option)"
    )
    console.print(f"run them with: appliance run --scenario simulatebench:{out} --limit 3")


def main() -> None:
    try:
        app(standalone_mode=False)
    except ApplianceError as error:
        error_console.print(f"error: {error}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        error_console.print("interrupted: finished episodes are stored; resume with --resume RUN_ID")
        sys.exit(130)
    except typer.Exit as exit_:
        sys.exit(exit_.exit_code)
    except typer.Abort:
        sys.exit(130)
    except Exception as error:  # click usage errors carry their own exit code
        import click

        if isinstance(error, click.ClickException):
            error.show()
            sys.exit(error.exit_code)
        raise


if __name__ == "__main__":
    main()
