"""`appliance import KIND PATH`: one command per import kind that a registered family declares.

No `from __future__ import annotations` here: typer reads the option annotations at run time, and
they refer to the importer of the closure that builds each command.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from appliance.cli.options import DbOption, console
from appliance.errors import ApplianceError
from appliance.scenarios.registry import Importer, ImportRequest, importers, run_import


def _command(importer: Importer) -> Callable[..., None]:
    def command(
        path: Annotated[Path, typer.Argument(help=importer.path_help)],
        out: Annotated[Path | None, typer.Option(help="where to write the converted data")] = None,
        name: Annotated[str | None, typer.Option(help="the stored set's name")] = None,
        db: DbOption = None,
    ) -> None:
        given = {"out": out, "name": name, "db": db}
        for option, value in given.items():
            if value is not None and option not in importer.options:
                raise ApplianceError(f"--{option}: 'appliance import {importer.kind}' takes no --{option}")
        if not path.exists():
            raise ApplianceError(f"{path}: not found")
        for line in run_import(importer, ImportRequest(path=path, out=out, name=name, db=db)):
            console.print(line)

    command.__doc__ = importer.help
    return command


def add_import_commands(app: typer.Typer) -> None:
    for kind, importer in importers().items():
        app.command(kind)(_command(importer))
