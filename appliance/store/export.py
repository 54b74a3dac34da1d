"""`appliance export RUN`: a run's episodes, messages, judgments and scores as files, through DuckDB's writers.

The columns are named and ordered here, not taken from the tables, so that a
schema migration does not change what a lab's downstream scripts read. Every
file carries the run, scenario, instance and player of its rows, so each can be
read alone.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.store.store import Store

#: format -> DuckDB COPY options (JSON is written one object per line)
COPY_OPTIONS: dict[str, str] = {
    "parquet": "FORMAT parquet",
    "jsonl": "FORMAT json",
    "csv": "FORMAT csv, HEADER true",
}
_EPISODE_KEYS = "e.run_id, e.scenario, e.instance_id, e.player, e.episode_id"

#: file name -> the SELECT that fills it (`?` is the run id)
TABLES: dict[str, str] = {
    "episodes": (
        f"SELECT {_EPISODE_KEYS}, e.player_model, e.partner_model, e.status, e.seed, e.started_at, "
        "e.finished_at, e.wall_s, e.error, CAST(e.metadata AS VARCHAR) AS metadata "
        "FROM episodes e WHERE e.run_id = ? ORDER BY e.episode_id"
    ),
    "messages": (
        f"SELECT {_EPISODE_KEYS}, m.idx AS message_idx, m.speaker, m.model, m.text, m.prompt_tokens, "
        "m.cached_prompt_tokens, m.completion_tokens, m.latency_s, m.finish_reason "
        "FROM messages m JOIN episodes e USING (episode_id) WHERE e.run_id = ? ORDER BY e.episode_id, m.idx"
    ),
    "judgments": (
        f"SELECT {_EPISODE_KEYS}, j.panel, j.judge, j.mode, j.template, j.target_idx AS message_idx, "
        "j.criterion, j.score, j.parsed, j.order_swapped, j.raw_text "
        "FROM judgments j JOIN episodes e USING (episode_id) WHERE e.run_id = ? "
        "ORDER BY e.episode_id, j.target_idx, j.panel, j.judge, j.criterion, j.order_swapped"
    ),
    "scores": (
        f"SELECT {_EPISODE_KEYS}, s.panel, s.player AS scored_model, s.metric, s.value, s.calibrated_value, "
        "s.calibration_id FROM scores s JOIN episodes e USING (episode_id) WHERE e.run_id = ? "
        "ORDER BY e.episode_id, s.panel, s.player, s.metric"
    ),
}


@dataclass(frozen=True)
class ExportedFile:
    table: str
    path: Path
    rows: int


def export_run(store: Store, run_id: str, out: Path, export_format: str) -> list[ExportedFile]:
    """Write `out/<table>.<ext>` for every table of `run_id`, and `out/run.json` with the run's record."""
    options = COPY_OPTIONS.get(export_format)
    if options is None:
        raise ApplianceError(f"--format: '{export_format}' is not one of {', '.join(COPY_OPTIONS)}")
    run = store.run(run_id)  # a clear error for an unknown run, before anything is written
    if out.exists() and not out.is_dir():
        raise ApplianceError(f"{out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ApplianceError(f"{out}: cannot create the export folder ({error.strerror})") from None
    written = []
    for table, select in TABLES.items():
        path = out / f"{table}.{export_format}"
        copied = store.query(f"COPY ({select}) TO '{_quoted(path)}' ({options})", [run_id])
        written.append(ExportedFile(table, path, int(copied[0][0])))  # COPY answers with its row count
    fields = {key: value for key, value in dataclasses.asdict(run).items() if key != "source"}
    record = {key: (str(value) if key in ("started_at", "finished_at") else value) for key, value in fields.items()}
    (out / "run.json").write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")
    return written


def _quoted(path: Path) -> str:
    """A path inside a SQL string literal (COPY takes no parameter for its target)."""
    return str(path.resolve()).replace("'", "''")
