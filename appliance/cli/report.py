"""`appliance report` and `appliance export`: a stored run as tables, or as files for other tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from appliance.cli.options import (
    DbOption,
    JsonOption,
    console,
    error_console,
)
from appliance.compare.render import print_sweep
from appliance.compare.sweep import SweepResult, run_sweep_results
from appliance.scenarios import ScenarioReport, build_scenario_report
from appliance.scenarios.registry import scenario_evidence
from appliance.store import Store

#: the file beside an export's tables that says what stands behind each judged figure
JUDGED_FIGURES = "judged_figures.json"


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
        scenarios = record.scenarios
        if record.status == "running":  # a live run reports the families it has stored episodes of so far
            stored = store.scenarios_stored(resolved)
            scenarios = [name for name in record.scenarios if name in stored]
            waiting = [name for name in record.scenarios if name not in stored]
            if waiting:
                (error_console if as_json else console).print(
                    f"no episodes stored yet of: {', '.join(waiting)}", markup=False, highlight=False
                )
        reports = [build_scenario_report(store, resolved, name, panel) for name in scenarios]
        sweeps, notes = run_sweep_results(store, resolved)
    if as_json:
        dumped = [_report_json(report, name, sweeps, notes) for report, name in zip(reports, scenarios, strict=True)]
        print(json.dumps(dumped, default=str))
        return
    for scenario_report in reports:
        scenario_report.render(console)
    for sweep in sweeps:
        print_sweep(console, sweep)
    for note in notes:
        console.print(note, markup=False, highlight=False)


def _report_json(
    scenario_report: ScenarioReport, scenario: str, sweeps: list[SweepResult], notes: list[str]
) -> dict[str, Any]:
    """One scenario's report as `--json` prints it. In a run that played a checkpoint sweep it also holds
    what the text prints after the families' tables: `sweeps`, each sweep limited to this scenario's curves
    and tests (as `compare --sweep --json` prints a whole one), and `sweep_notes`. The top level stays a
    list of scenario reports, so readers of runs without a sweep see exactly what they saw before."""
    dumped = scenario_report.model_dump()
    if sweeps or notes:
        parts = [(sweep, sweep.of_scenario(scenario)) for sweep in sweeps]
        dumped["sweeps"] = [
            part.as_json(holm_tests=len(whole.comparison.metrics)) for whole, part in parts if part.curves
        ]
        dumped["sweep_notes"] = notes
    return dumped


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
        stored = store.scenarios_stored(resolved)
        figures = [
            figure.model_dump()
            for scenario in store.run(resolved).scenarios
            if scenario in stored
            for figure in scenario_evidence(store, resolved, scenario)
        ]
    evidence = folder / JUDGED_FIGURES
    evidence.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    if as_json:
        tables = [{"table": f.table, "path": str(f.path), "rows": f.rows} for f in written]
        print(json.dumps([*tables, {"table": "judged_figures", "path": str(evidence), "rows": len(figures)}]))
        return
    for exported in written:
        console.print(f"{exported.table}: {exported.rows} rows -> {exported.path}")
    console.print(f"run record -> {folder / 'run.json'}")
    console.print(f"judged figures (calibration, separation) -> {evidence}")
