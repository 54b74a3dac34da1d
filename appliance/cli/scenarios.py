"""`appliance scenarios list|generate`: the families, and instance files made from their generators."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from appliance.cli.options import (
    DbOption,
    JsonOption,
    console,
    split_values,
)
from appliance.errors import ApplianceError
from appliance.paths import project_root
from appliance.run.planning import DEFAULT_LIMIT
from appliance.run.runner import instances_for_run
from appliance.scenarios import GenerateRequest, load_family
from appliance.scenarios.registry import families as registered_families
from appliance.scenarios.registry import family_entry

scenarios_app = typer.Typer(no_args_is_help=True, help="Scenario families and their instances.")


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


scenarios_app.command("list")(scenarios_list)
scenarios_app.command("generate")(scenarios_generate)
