"""Judge panels: named lists of judge models in `judges/panels.toml`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from appliance.errors import ApplianceError, describe_validation_error
from appliance.util.tomlfile import read_toml

#: how a panel's judges rate: "sampled" asks each for a verdict (a digit, a choice) and parses it;
#: "likelihood" reads their token probabilities (prefill only) with `likelihood_template`
JudgingKind = Literal["sampled", "likelihood"]


class Panel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    judges: list[str] = Field(min_length=1)
    description: str = ""
    judging: JudgingKind = "sampled"
    #: the judges/ template of a likelihood panel's per-reply features
    likelihood_template: str = "turn_likelihood"

    @property
    def likelihood_template_or_none(self) -> str | None:
        """The template families judge with when the panel reads probabilities; None for sampled verdicts."""
        return self.likelihood_template if self.judging == "likelihood" else None


def load_panels(path: Path) -> dict[str, Panel]:
    raw = read_toml(path, "panels file")
    panels: dict[str, Panel] = {}
    tables = raw.get("panels", {})
    if not isinstance(tables, dict):
        raise ApplianceError(f"{path}: field 'panels': expected [panels.NAME] tables")
    for name, entry in tables.items():
        if not isinstance(entry, dict):
            raise ApplianceError(f"{path}: field 'panels.{name}': expected a table")
        try:
            panels[name] = Panel.model_validate({**entry, "name": name})
        except ValidationError as error:
            raise ApplianceError(describe_validation_error(f"{path} [panels.{name}]", error)) from None
    if not panels:
        raise ApplianceError(f"{path}: field 'panels': no [panels.NAME] table found")
    return panels


def get_panel(path: Path, name: str) -> Panel:
    panels = load_panels(path)
    if name not in panels:
        raise ApplianceError(f"{path}: unknown panel '{name}' (known: {', '.join(sorted(panels))})")
    return panels[name]
