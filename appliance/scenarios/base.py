"""What every scenario family provides to the runner."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from appliance.episodes import EpisodeContext

#: the panel name of scores that rules compute (game masters, referees), not judges
RULES_PANEL = "rules"


class Instance(BaseModel):
    """One playable item of a family (a card and a situation, a game instance, ...)."""

    model_config = ConfigDict(frozen=True)

    id: str
    language: str = "en"

    def describe(self) -> dict[str, str]:
        """Facts stored with the episode for reports to group by (e.g. a profile's character and variant)."""
        return {}


class ScenarioFamily(Protocol):
    """A family may also define `select_instances(instances, limit, seed)` to choose its own
    subset for `--limit` (the runner's default is a seeded sample of `limit` instances)."""

    name: str
    description: str
    #: roles other than "player" and "judge" that need a model (e.g. "interrogator")
    support_roles: tuple[str, ...]
    #: the judge template whose verdicts a calibration can map to a human scale
    judge_template: str
    #: the episode score that receives the calibrated value beside the raw one
    calibrated_metric: str

    def instances(self) -> list[Instance]: ...

    def data_files(self) -> list[Path]:
        """Files whose hashes a run records (relative to the project root)."""
        ...

    async def play(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        """Run one episode to its end, recording messages, judgments and scores in `ctx`."""
        ...

    async def judge(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        """Judge the transcript in `ctx.messages` (also used to rescore a stored run with another panel)."""
        ...


@runtime_checkable
class StagedFamily(Protocol):
    """A family played as a pipeline of stages (SimulBench: collect, extract, evaluate, compare).

    Each stage is a `ScenarioFamily` whose episodes the runner plays after
    those of the stage before it; a stage that builds its instances from
    earlier stages' stored episodes defines `prepare(store, run_id)`, which the
    runner calls before planning it (also on resume, so every stage resumes).
    """

    name: str
    description: str
    #: the rating template whose calibration the runner picks for the family's stages
    judge_template: str

    def stages(self) -> list[ScenarioFamily]:
        """The stages in order; the first one's instances are what `scenarios list` counts."""
        ...


#: what `load_family` returns: a family played in one go, or one played in stages
Family = ScenarioFamily | StagedFamily
