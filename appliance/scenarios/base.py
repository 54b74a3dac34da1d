"""What every scenario family provides to the runner.

A family plays episodes of instances (`ScenarioFamily`); one that calls a
judge panel is a `JudgedFamily`; one played as a pipeline of stages is a
`StagedFamily` whose stages are scenario families. Every hook the runner
may call is declared here with its default, so mypy checks each family.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict

from appliance.episodes.context import EpisodeContext
from appliance.run_config import SupportRole
from appliance.store.run_view import RunView

#: the `panel` column of scores and verdicts that rules compute (game masters, referees, answer parsers)
RULE_SCORER = "rules"

SUPPORT_ROLES: tuple[SupportRole, ...] = ("interrogator", "user_agent", "simulator")


class Instance(BaseModel):
    """One playable item of a family (a card and a situation, a game instance, ...)."""

    model_config = ConfigDict(frozen=True)

    id: str
    language: str = "en"

    def describe(self) -> dict[str, str]:
        """Facts stored with the episode for reports to group by (e.g. a profile's character and variant)."""
        return {}


def seeded_sample(instances: list[Instance], limit: int | None, seed: int) -> list[Instance]:
    """A seeded sample, so a limited run still covers cards, situations and languages."""
    chosen = list(instances)
    random.Random(seed).shuffle(chosen)
    return chosen if limit is None else chosen[:limit]


class ScenarioFamily(ABC):
    """Plays episodes: a whole family, or one stage of a staged family."""

    name: str
    description: str = ""
    #: roles other than player and judges that need a model (e.g. "interrogator")
    support_roles: tuple[SupportRole, ...] = ()
    #: its episodes run model-written code (appliance.sandbox): a run needs kernel isolation or
    #: the user's explicit --unsafe-code-execution
    runs_model_code: bool = False

    @abstractmethod
    def instances(self) -> list[Instance]:
        """Every instance this family (or stage) can play now."""

    @abstractmethod
    def data_files(self) -> list[Path]:
        """Files whose hashes a run records."""

    def settings_snapshot(self) -> dict[str, object]:
        """The settings a run plays with, stored with the run so its report reads them later
        (empty: the report needs none)."""
        return {}

    @abstractmethod
    async def play(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        """Run one episode to its end, recording messages, judgments and scores in `ctx`."""

    def stages(self) -> list[ScenarioFamily]:
        """A family played in one go is its own single stage."""
        return [self]

    def select_instances(self, instances: list[Instance], limit: int | None, seed: int) -> list[Instance]:
        """The subset a run plays for `--limit` (default: a seeded sample of `limit` instances)."""
        return seeded_sample(instances, limit, seed)

    def two_player(self, instance: Instance) -> bool:
        """Whether a second model plays the partner roles of `instance` (cross-play pairs them)."""
        return False

    def pairings(
        self, players: list[str], support: Mapping[SupportRole, str], instance: Instance, cross_play: bool
    ) -> list[tuple[str, str]]:
        """(player, partner) pairs that play `instance`: self-play for everyone, and with `cross_play`
        every ordered pair of distinct players in two-player games."""
        pairs = [(player, player) for player in players]
        if cross_play and self.two_player(instance):
            pairs += [(a, b) for a in players for b in players if a != b]
        return pairs

    def table(self, players: list[str], instance: Instance) -> tuple[str, ...]:
        """Models that all sit in one game of `instance` (an N-player game, one episode for all of
        them); empty when the instance is played by `pairings`."""
        return ()

    def lineage(self, instance: Instance) -> str | None:
        """What a shard keeps together with `instance` (`appliance.sharding`): one key shared by the
        instances of every stage that builds on its episodes. None (the default): nothing builds on
        them, and each of its episodes is dealt alone."""
        return None

    def prepare(self, run: RunView) -> None:
        """Called before this stage is planned (also on resume): a stage that builds its instances
        from earlier stages' stored episodes reads them here."""
        return None


class JudgedFamily(ScenarioFamily):
    """A family whose episodes the judge panel rates; `appliance score` re-judges them with another panel."""

    #: the judge template whose verdicts a calibration maps to a human scale (None: not rescored)
    judge_template: str | None = None
    #: the episode score that receives the calibrated value beside the raw one
    calibrated_metric: str | None = None
    #: whether a likelihood panel judges this family (its `judge` uses `ctx.likelihood_template`)
    scores_likelihood: bool = False
    #: under a likelihood panel, each calibrated episode metric and the human label set and criterion
    #: its calibration must be fitted on (`calibrated_metric` first; the others are the family's criteria)
    likelihood_targets: Mapping[str, tuple[str, str]] = MappingProxyType({})
    #: the template a likelihood panel reads this family with where the panel's own (made for turns of a
    #: conversation) does not fit: SimulBench's comparisons read a pair with `instruction_likelihood`
    own_likelihood_template: str | None = None
    #: what the calibration of `calibrated_metric` maps: a rating onto a human scale, or a pair's features
    #: onto a preference for one response and a tie band (a `pair_features` calibration)
    calibrated_kind: Literal["rating", "pair"] = "rating"

    @abstractmethod
    async def judge(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        """Judge the transcript in `ctx.messages` (at the end of play, and to rescore a stored run)."""


class StagedFamily(ABC):
    """A family played as a pipeline of stages (SimulBench: collect, extract, evaluate, compare).

    The runner plays each stage's episodes after those of the stage before it,
    calling each stage's `prepare` first.
    """

    name: str
    description: str = ""

    @abstractmethod
    def stages(self) -> list[ScenarioFamily]:
        """The stages in order; the first one's instances are what `scenarios list` counts."""

    def settings_snapshot(self) -> dict[str, object]:
        """As `ScenarioFamily.settings_snapshot`, for the whole pipeline."""
        return {}


#: what a family's loader returns: a family played in one go, or one played in stages
Family = ScenarioFamily | StagedFamily
