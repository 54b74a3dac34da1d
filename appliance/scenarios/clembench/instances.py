"""Game instances and instance sets (a JSON file, or a set stored in DuckDB).

An instance carries everything its game needs, prompts included, so a stored
set replays exactly even after the templates in scenarios/clembench/ change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from appliance.errors import ApplianceError
from appliance.scenarios.base import Instance

INSTANCE_SET_FORMAT = "appliance.clembench.instances/1"


class ClemInstance(Instance):
    game: str
    experiment: str
    params: dict[str, Any]

    def describe(self) -> dict[str, str]:
        return {"game": self.game, "experiment": self.experiment}


class InstanceSet(BaseModel):
    format: str = INSTANCE_SET_FORMAT
    name: str
    source: str
    seed: int | None = None
    instances: list[ClemInstance]


def write_instance_set(instance_set: InstanceSet, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(instance_set.model_dump_json(indent=1), encoding="utf-8")


def read_instance_set(path: Path) -> InstanceSet:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ApplianceError(f"{path}: cannot read an instance set ({error})") from None
    if not isinstance(data, dict) or data.get("format") != INSTANCE_SET_FORMAT:
        raise ApplianceError(f"{path}: field 'format' is not '{INSTANCE_SET_FORMAT}'")
    try:
        instance_set = InstanceSet.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ApplianceError(f"{path}: field '{where}': {first['msg']}") from None
    return instance_set
