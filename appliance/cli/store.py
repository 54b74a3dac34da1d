"""`appliance store check|repair`: the store against its journal, and rebuilt from it."""

from __future__ import annotations

import json
from dataclasses import asdict

import typer

from appliance.cli.options import DbOption, JsonOption, console
from appliance.store import default_db_path

store_app = typer.Typer(
    no_args_is_help=True, help="The store's health: checked against, and rebuilt from, its journal."
)


@store_app.command("check")
def store_check(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Compare every journaled run, instance set and calibration with the store, row by row.
    Exit 0 when they agree, 1 when they differ (repair rebuilds the store), 2 when it will not open.
    Run it while no run writes to the store: a live run's journal is one write ahead."""
    from appliance.store.repair import check_store

    path = db or default_db_path()
    report = check_store(path)
    if as_json:
        runs = [asdict(run) | {"ok": run.ok, "summary": run.describe()} for run in report.runs]
        print(json.dumps(asdict(report) | {"ok": report.ok, "runs": runs}))
    else:
        for run in report.runs:
            console.print(run.describe(), markup=False, highlight=False)
        for problem in report.other_problems:
            console.print(problem, markup=False, highlight=False)
        if report.unjournaled_runs:
            console.print(f"runs without a journal (made before journals): {', '.join(report.unjournaled_runs)}")
        console.print(
            "the store matches its journal" if report.ok else f"repair with: appliance store repair --db {path}"
        )
    if not report.ok:
        raise typer.Exit(1)


@store_app.command("repair")
def store_repair(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Rebuild the store from its journal, copying what no journal holds from the old file as far as
    it reads; the old file is kept beside it (`<db>.damaged-<time>`)."""
    from appliance.store.repair import repair_store

    path = db or default_db_path()
    report = repair_store(path)
    if as_json:
        print(json.dumps(asdict(report), default=str))
    else:
        for line in report.lines():
            console.print(line, markup=False, highlight=False)
