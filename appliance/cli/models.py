"""`appliance models list|check`: the models of models.toml, where their files are, whether they load."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from appliance.catalog.models import ModelSpec, locate_model_file
from appliance.cli.options import (
    JsonOption,
    ModelsOption,
    console,
    load_models,
)
from appliance.errors import ApplianceError

models_app = typer.Typer(no_args_is_help=True, help="The models of models.toml.")


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
                "note": "" if present else _first_use_note(spec),
                "base": spec.base,
                "sweep": spec.sweep,
                "step": spec.step,
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


def _first_use_note(spec: ModelSpec) -> str:
    if spec.parts is not None:
        return f"joined from its {len(spec.parts)} part packages on first use"
    return "assembled from its package on first use" if spec.assemble else ""


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


models_app.command("list")(models_list)
models_app.command("check")(models_check)
