"""`appliance view [RUN ...]`: one self-contained HTML page; `--serve` shows it on 127.0.0.1."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from appliance.cli.options import DbOption, JsonOption, console
from appliance.paths import judges_dir
from appliance.store import Store


def view(
    run_ids: Annotated[
        list[str] | None, typer.Argument(help="runs to show (default: the latest); two runs are also compared")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="HTML file to write (default: ./view-RUN_ID.html)")] = None,
    max_transcripts: Annotated[int, typer.Option(min=0, help="transcripts put in the page, in run order")] = 500,
    serve: Annotated[bool, typer.Option("--serve", help="serve the page on 127.0.0.1 until Ctrl-C")] = False,
    port: Annotated[int, typer.Option(min=0, max=65535, help="port for --serve (0: any free port)")] = 8765,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Leaderboards with interval plots, calibration plots, per-instance deltas of two runs, and a
    transcript browser where a person can rate transcripts and export the ratings as labels."""
    from appliance.view import build_view, serve_file

    with Store.open(db, read_only=True) as store:
        resolved = [store.resolve_run_id(run_id) for run_id in run_ids] if run_ids else [store.resolve_run_id(None)]
        path = out or Path(f"view-{'-vs-'.join(resolved)}.html")
        written = build_view(store, resolved, path, judges_dir(), max_transcripts=max_transcripts)
    if as_json:
        print(json.dumps({"path": str(written), "runs": resolved, "bytes": written.stat().st_size}))
    else:
        console.print(f"wrote {written} ({written.stat().st_size / 1e6:.1f} MB; opens offline in any browser)")
    if serve:

        def announce(url: str) -> None:
            console.print(f"serving {url} (Ctrl-C stops)")
            sys.stdout.flush()  # a supervising process reads the URL while the server runs

        serve_file(written, port, announce)
