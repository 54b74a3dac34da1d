"""Write the page for some runs, and serve it on 127.0.0.1 when asked."""

from __future__ import annotations

import functools
import http.server
from collections.abc import Callable, Sequence
from pathlib import Path

from appliance.store import Store
from appliance.view.contents import collect_contents
from appliance.view.page import render_page


def build_view(store: Store, run_ids: Sequence[str], out: Path, judges_dir: Path, *, max_transcripts: int) -> Path:
    """Write `out` (parents created) and return it; with two runs the page also compares them."""
    contents = collect_contents(store, run_ids, judges_dir, max_transcripts=max_transcripts)
    title = "appliance: " + (" vs ".join(run_ids) if len(run_ids) == 2 else ", ".join(run_ids))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_page(contents, title), encoding="utf-8")
    return out


def serve_file(path: Path, port: int, on_ready: Callable[[str], None]) -> None:
    """Serve the page's folder on 127.0.0.1 only, until interrupted; `on_ready` gets the page's URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(path.parent))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        on_ready(f"http://127.0.0.1:{server.server_address[1]}/{path.name}")
        server.serve_forever()
