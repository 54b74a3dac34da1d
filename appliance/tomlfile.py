"""Reading the project's TOML files with one-line errors that name the file."""

from __future__ import annotations

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
