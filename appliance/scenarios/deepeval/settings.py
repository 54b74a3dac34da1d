"""scenarios/deepeval/deepeval.toml: repetition rule, per-task rules and the referee's prompts."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from appliance.errors import ApplianceError, describe_validation_error
from appliance.sandbox.limits import SandboxLimits
from appliance.util.tomlfile import read_toml

SETTINGS_FILE = "deepeval.toml"
EntryT = TypeVar("EntryT", bound=BaseModel)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Repetitions(_Section):
    """Repeat a task until its payoff means are stable (DeepEval's stableness condition)."""

    initial: int = Field(default=3, ge=1)
    step: int = Field(default=2, ge=1)
    max: int = Field(default=9, ge=1)
    confidence: float = Field(default=0.95, gt=0.0, lt=1.0)
    #: stable when every interval's half-width is at most this share of the payoff range
    tolerance: float = Field(default=0.1, gt=0.0)

    @model_validator(mode="after")
    def _check(self) -> Repetitions:
        if self.initial > self.max:
            raise ValueError("initial must not exceed max")
        return self

    def waves(self) -> int:
        """How many waves the most unstable task can need: the first, then `step` more each time."""
        return 1 + -(-(self.max - self.initial) // self.step)


class Players(_Section):
    temperature: float = Field(default=0.7, ge=0.0)


class PublicGoods(_Section):
    seats: int = Field(default=4, ge=2)
    rounds: int = Field(default=5, ge=1)
    endowment: int = Field(default=10, ge=1)
    alpha: float = Field(default=1.2, gt=0.0)
    max_tokens: int = Field(default=96, ge=16)
    reason_max_chars: int = Field(default=160, ge=1)
    system: str
    first_round: str
    feedback_mode1: str
    feedback_mode2: str
    next_round: str
    invalid_amount: str


class ChainPrompts(_Section):
    system: str
    opening: str
    turn: str


class WordChain(_Section):
    max_moves: int = Field(default=12, ge=2)
    max_tokens: int = Field(default=16, ge=2)
    idiom: ChainPrompts
    english: ChainPrompts


class CodeReview(_Section):
    max_reviews: int = Field(default=2, ge=1)
    done_word: str = "DONE"
    programmer_max_tokens: int = Field(default=256, ge=16)
    reviewer_max_tokens: int = Field(default=160, ge=8)
    programmer_system: str
    task: str
    reviewer_system: str
    review: str
    revise: str
    rereview: str
    programmer_criteria: str
    reviewer_criteria: str
    sandbox: SandboxLimits = Field(default_factory=SandboxLimits)


PAPER_PAIRS = ("English->Chinese", "English->French", "German->English")


class Translation(_Section):
    #: the language pairs played, as `source->target`, in the order repetitions cycle through them
    pairs: list[str] = Field(default_factory=lambda: list(PAPER_PAIRS), min_length=1)
    max_tokens: int = Field(default=192, ge=16)
    translator_system: str
    translate: str
    proofreader_system: str
    proofread: str
    translator_criteria: str
    proofreader_criteria: str


class DeepEvalSettings(_Section):
    repetitions: Repetitions = Field(default_factory=Repetitions)
    players: Players = Field(default_factory=Players)
    public_goods: PublicGoods
    word_chain: WordChain
    code_review: CodeReview
    translation: Translation

    @classmethod
    def load(cls, path: Path) -> DeepEvalSettings:
        raw = read_toml(path, "DeepEval settings")
        try:
            return cls.model_validate(raw)
        except ValidationError as error:
            raise ApplianceError(describe_validation_error(path, error)) from None


def read_entries(path: Path, table: str, entry: type[EntryT], what: str) -> list[EntryT]:
    """A data file's `[[table]]` entries (problems, passages), which need unique ids."""
    raw = read_toml(path, what)
    try:
        entries = [entry.model_validate(item) for item in raw.get(table, [])]
    except ValidationError as error:
        raise ApplianceError(describe_validation_error(path, error)) from None
    ids = [getattr(item, "id", None) for item in entries]
    if not entries or len(set(ids)) != len(ids):
        raise ApplianceError(f"{path}: needs [[{table}]] entries with unique ids")
    return entries
