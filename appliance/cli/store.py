"""`appliance store check|repair`: the store against its journal, and rebuilt from it; `appliance
merge`: shards' stores joined into one."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from appliance.cli.options import DbOption, JsonOption, console, error_console
from appliance.store import default_db_path

if TYPE_CHECKING:
    from appliance.store.repair import Reconciliation

#: a run, merge or rescoring ended with the store lacking what its journal holds, and the rebuild did not take
UNREPAIRED_EXIT = 3


def report_store_check(check: Reconciliation) -> None:
    """The one line a run, merge or rescoring prints where the store lacked what the run journaled (restored
    from the journal, or not: then exit 3)."""
    line = check.line()
    if line is not None:
        error_console.print(line, markup=False, highlight=False, soft_wrap=True)
    if check.unrepaired is not None:
        raise typer.Exit(UNREPAIRED_EXIT)


store_app = typer.Typer(
    no_args_is_help=True, help="The store's health: checked against, and rebuilt from, its journal."
)


@store_app.command("check")
def store_check(
    db: DbOption = None,
    runs_only: Annotated[
        list[str] | None, typer.Option("--run", help="check only this run (repeatable; default: everything)")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Compare every journaled run, instance set and calibration with the store, row by row.
    Exit 0 when they agree, 1 when they differ (repair rebuilds the store), 2 when it will not open.
    Run it while no run writes to the store: a live run's journal is one write ahead."""
    from appliance.store.repair import check_store

    path = db or default_db_path()
    report = check_store(path, runs_only or None)
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


def merge(
    shards: Annotated[list[Path], typer.Argument(help="the shards' stores (appliance run --shard I/N --db ...)")],
    into: Annotated[Path, typer.Option("--into", help="the store that receives the whole run")],
    run: Annotated[str | None, typer.Option(help="the sharded run to join (default: the one the stores hold)")] = None,
    as_json: JsonOption = False,
) -> None:
    """Join the stores of every shard of a plan into one run, stored as the unsharded run would be.
    Shards of different plans, a missing or unfinished shard, or a run the target holds already are
    refused in one line, with nothing written."""
    from appliance.store.merge import merge_shards

    summary = merge_shards(shards, into, run)
    if as_json:
        print(json.dumps(asdict(summary)))
        report_store_check(summary.store_check)
        return
    for shard, facts in summary.shards.items():
        console.print(f"shard {shard}: {facts['episodes']} episodes from {facts['db']}", markup=False, highlight=False)
    console.print(
        f"run {summary.run_id}: {summary.episodes} episodes merged into {summary.into}", markup=False, highlight=False
    )
    report_store_check(summary.store_check)
