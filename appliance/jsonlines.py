"""Reading JSONL files (imported labels, SimulBench's published data) with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError


def read_jsonl_rows(path: Path, what: str = "file") -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a line that is not a JSON object is named."""
    if not path.is_file():
        raise ApplianceError(f"{path}: {what} not found")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ApplianceError(f"{path}: cannot read {what} ({error})") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ApplianceError(f"{path}: line {number}: not valid JSON: {error}") from None
        if not isinstance(row, dict):
            raise ApplianceError(f"{path}: line {number}: expected a JSON object")
        rows.append((number, row))
    return rows
