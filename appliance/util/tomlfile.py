"""Reading the project's TOML files with one-line errors that name the file."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError


def read_toml(path: Path, what: str = "file") -> dict[str, Any]:
    if not path.is_file():
        raise ApplianceError(f"{path}: {what} not found")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ApplianceError(f"{path}: not valid TOML: {error}") from None
    except UnicodeDecodeError as error:
        raise ApplianceError(f"{path}: not UTF-8 text (byte {error.start})") from None
    except OSError as error:
        raise ApplianceError(f"{path}: cannot read {what}: {error.strerror}") from None


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    # JSON string escapes are valid TOML basic-string escapes
    return json.dumps(str(value), ensure_ascii=False)


def to_toml(document: dict[str, Any]) -> str:
    """A small TOML writer for what the importers produce.

    Scalars and lists of scalars become keys, dicts of scalars become tables,
    and lists of dicts become arrays of tables (written last, as TOML needs).
    """
    lines: list[str] = []
    tables: list[tuple[str, dict[str, Any]]] = []
    arrays: list[tuple[str, list[dict[str, Any]]]] = []
    for key, value in document.items():
        if value is None:
            continue
        if isinstance(value, dict):
            tables.append((key, value))
        elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            arrays.append((key, value))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    for key, table in tables:
        lines += ["", f"[{key}]", *(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in table.items())]
    for key, rows in arrays:
        for row in rows:
            lines += ["", f"[[{key}]]", *(f"{k} = {_toml_value(v)}" for k, v in row.items() if v is not None)]
    return "\n".join(lines) + "\n"
