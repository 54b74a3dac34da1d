"""Judge templates live in `judges/*.toml`; this module loads and renders them."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from appliance.errors import ApplianceError, describe_validation_error
from appliance.tomlfile import read_toml


class LikertTemplate(BaseModel):
    """Per-turn multi-criteria Likert rating with an optional refusal flag."""

    model_config = ConfigDict(extra="forbid")

    name: str
    mode: Literal["likert"] = "likert"
    criteria: list[str] = Field(min_length=1)
    scale_min: int = 1
    scale_max: int = 5
    refusal_flag: bool = True
    system: str
    user: str
    max_tokens: int = 64
    temperature: float = 0.1

    @model_validator(mode="after")
    def _check(self) -> LikertTemplate:
        if not 0 <= self.scale_min < self.scale_max <= 9:
            raise ValueError("scale must be single digits with scale_min < scale_max")
        for criterion in self.criteria:
            if not criterion.isidentifier():
                raise ValueError(f"criterion '{criterion}' must be an identifier")
        return self


def load_likert_template(path: Path) -> LikertTemplate:
    raw = read_toml(path, "judge template")
    try:
        return LikertTemplate(name=path.stem, **raw)
    except ValidationError as error:
        raise ApplianceError(describe_validation_error(path, error)) from None


def render(text: str, variables: dict[str, str], source: str) -> str:
    try:
        return text.format_map(variables)
    except KeyError as error:
        raise ApplianceError(f"{source}: template uses unknown placeholder {error}") from None
