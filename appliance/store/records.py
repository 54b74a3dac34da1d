"""Typed records that the runner hands to the store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from appliance.errors import ApplianceError
from appliance.run_config import RunConfig


class MessageRecord(BaseModel):
    idx: int
    speaker: str
    model: str
    text: str
    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str


class JudgmentRecord(BaseModel):
    panel: str
    judge: str
    mode: str
    template: str = ""
    target_idx: int
    criterion: str
    score: float | None
    raw_text: str
    parsed: bool
    order_swapped: bool = False


class ScoreRecord(BaseModel):
    panel: str
    player: str
    metric: str
    value: float | None
    calibrated_value: float | None = None
    calibration_id: str | None = None


class EpisodeRecord(BaseModel):
    """Everything one finished (or failed) episode produced, written in one transaction."""

    episode_id: str
    run_id: str
    scenario: str
    instance_id: str
    #: the pairing's label: "A" in self-play, "A--B" when B played the partner roles
    player: str
    status: str
    seed: int
    started_at: datetime
    finished_at: datetime
    wall_s: float
    error: str | None = None
    #: the models behind the label (None for imported episodes of unknown models)
    player_model: str | None = None
    partner_model: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    messages: list[MessageRecord] = Field(default_factory=list)
    judgments: list[JudgmentRecord] = Field(default_factory=list)
    scores: list[ScoreRecord] = Field(default_factory=list)


class RunRecord(BaseModel):
    run_id: str
    started_at: datetime
    seed: int
    config: dict[str, Any]
    versions: dict[str, str]
    git_revision: str | None
    file_hashes: dict[str, str]


class ModelRecord(BaseModel):
    name: str
    backend: str
    path: str
    sha256: str
    parameters: dict[str, Any]


class LabelVerdict(BaseModel):
    """A judge's verdict on a labelled item, cached so calibration reruns cost nothing."""

    item_id: str
    judge: str
    variant: str
    order_swapped: bool = False
    score: float | None
    raw_text: str
    parsed: bool
    #: a probability-reading judge's features (the score is the template's summary feature)
    features: dict[str, float] = {}


class CalibrationRecord(BaseModel):
    """A fitted calibration of a panel on a label set: what later runs apply to raw judge scores."""

    calibration_id: str
    created_at: datetime
    panel: str
    judges: list[str]
    label_set: str
    criterion: str
    template: str
    seed: int
    fit_items: list[str]
    heldout_items: list[str]
    model: dict[str, Any]
    metrics: dict[str, Any]


@dataclass(frozen=True)
class StoredRun:
    """A run as the store holds it. `config` is the stored JSON: a full run config for runs the
    appliance played, a description of the source for imported runs (`run_config` says which)."""

    run_id: str
    started_at: datetime
    finished_at: datetime | None
    status: str
    seed: int
    config: dict[str, Any]
    wall_s: float | None
    planned_episodes: int | None
    #: the store file it came from (named in errors)
    source: Path

    @property
    def scenarios(self) -> list[str]:
        return [str(name) for name in self.config.get("scenarios", [])]

    def run_config(self) -> RunConfig:
        """The config the run was played with; an imported run has none (one line, exit 2)."""
        if "imported_from" in self.config or "panel" not in self.config:
            source = self.config.get("imported_from", "another system")
            raise ApplianceError(f"{self.source}: run '{self.run_id}' was imported from {source}; it has no run config")
        return RunConfig.model_validate(self.config)
