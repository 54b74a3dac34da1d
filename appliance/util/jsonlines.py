"""Reading JSONL files (imported labels, SimulBench's published data) with one-line errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError


def iter_jsonl_rows(path: Path, what: str = "file") -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line, read one line at a time (files of any size)."""
    if not path.is_file():
        raise ApplianceError(f"{path}: {what} not found")
    number = 0
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ApplianceError(f"{path}: line {number}: not valid JSON: {error}") from None
                except RecursionError:
                    raise ApplianceError(f"{path}: line {number}: nested too deeply") from None
                if not isinstance(row, dict):
                    raise ApplianceError(f"{path}: line {number}: expected a JSON object")
                yield number, row
    except UnicodeDecodeError as error:
        raise ApplianceError(f"{path}: line {number + 1}: not UTF-8 text (byte {error.start} of the line)") from None
    except OSError as error:
        raise ApplianceError(f"{path}: cannot read {what} ({error.strerror})") from None


def read_jsonl_rows(path: Path, what: str = "file") -> list[tuple[int, dict[str, Any]]]:
    """Every row at once, for files that are small by nature (task lists, published scripts)."""
    return list(iter_jsonl_rows(path, what))
