"""Helpers every game module uses to read its TOML data and build instances."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError
from appliance.scenarios.clembench.instances import ClemInstance


def load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ApplianceError(f"{path}: cannot read ({error.strerror})") from None
    except tomllib.TOMLDecodeError as error:
        raise ApplianceError(f"{path}: {error}") from None


def need(data: dict[str, Any], key: str, path: Path) -> Any:
    if key not in data:
        raise ApplianceError(f"{path}: missing field '{key}'")
    return data[key]


def new_instance(game: str, experiment: str, index: int, params: dict[str, Any], language: str = "en") -> ClemInstance:
    return ClemInstance(
        id=f"{game}/{experiment}/{index}", game=game, experiment=experiment, params=params, language=language
    )


def literal(value: Any) -> Any:
    """Some published fields are Python reprs of dicts rather than JSON."""
    return ast.literal_eval(value) if isinstance(value, str) else value
