"""Options and consoles shared by the CLI's command modules."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from appliance.catalog import Catalog, load_catalog
from appliance.paths import default_models_file

# Piped output (CI logs, tests) gets a wide console so tables are not truncated.
console = Console(width=None if sys.stdout.isatty() else 200)
error_console = Console(stderr=True)

DbOption = Annotated[
    Path | None, typer.Option("--db", help="DuckDB file (default: $APPLIANCE_DB or ./appliance.duckdb)")
]
ModelsOption = Annotated[Path | None, typer.Option("--models", help="models.toml to use")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON for machines")]


def load_models(models: Path | None) -> Catalog:
    return load_catalog(models or default_models_file())


def split_values(values: list[str] | None) -> list[str]:
    """Repeatable options that also accept comma-separated lists."""
    return [part.strip() for value in values or [] for part in value.split(",") if part.strip()]
