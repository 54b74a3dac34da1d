"""Typed records that the runner hands to the store."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


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
