"""Options and consoles shared by the CLI's command modules."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from appliance.catalog.models import Catalog, load_catalog
from appliance.catalog.panels import Panel, get_panel
from appliance.paths import default_models_file, judges_dir

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


PanelOption = Annotated[str, typer.Option(help="judge panel from judges/panels.toml")]


def load_panel(name: str, catalog: Catalog) -> Panel:
    """A panel whose judges are all in the catalog (checked before any work starts)."""
    panel = get_panel(judges_dir() / "panels.toml", name)
    for judge in panel.judges:
        catalog.get(judge)
    return panel
