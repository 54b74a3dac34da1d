"""One planned episode played to its record: what the runner, and a remote worker, do with each.

`PlannedEpisode` is what the runner plans (an instance of a family, who plays it, its seed);
`EpisodePlayer` plays one through a scheduler and returns the `EpisodeRecord` the store writes. The
player holds only what an episode needs (the catalog, the run's config and calibrations), not the
store, so that it can travel to a worker process that holds its own model pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Protocol

from appliance.calibration.apply import calibrated_features, calibrated_scores
from appliance.catalog.models import Catalog
from appliance.engine.backend import BackendCounters
from appliance.episodes.client import EpisodeFailed
from appliance.episodes.context import EpisodeContext, EpisodeKey
from appliance.episodes.pool import ModelPool, OnResult
from appliance.episodes.roles import BackendFactory, episode_roles
from appliance.episodes.scheduler import Scheduler
from appliance.run.interrupts import StopRequest
from appliance.run_config import RunConfig
from appliance.scenario_spec import family_of
from appliance.scenarios.base import Instance, ScenarioFamily
from appliance.store import EpisodeRecord
from appliance.store.records import CalibrationRecord


@dataclass(frozen=True)
class PlannedEpisode:
    key: EpisodeKey
    family: ScenarioFamily
    instance: Instance
    player: str
    seed: int
    #: the model in the partner roles of two-player games (the player itself in self-play)
    partner: str
    #: every model of an N-player game (one episode seats them all); empty for pairings
    table: tuple[str, ...] = ()

    @property
    def episode_id(self) -> str:
        return self.key.id

    @property
    def lineage(self) -> str:
        """What a shard keeps together with this episode (`ScenarioFamily.lineage`, within its family),
        or the episode alone."""
        shared = self.family.lineage(self.instance)
        return self.key.seed_key if shared is None else f"{self.family.name}\n{shared}"


def turns_for(config: RunConfig, family: ScenarioFamily) -> int | None:
    """The family's quick-suite turn cap where the run has one, else the run's."""
    return config.turn_caps.get(family_of(family.name), config.turns)


def reply_cap_for(config: RunConfig, family: ScenarioFamily) -> int | None:
    """The family's quick-suite cap on a reply's tokens, where the run has one."""
    return config.reply_caps.get(family_of(family.name))


@dataclass
class EpisodePlayer:
    """Plays planned episodes of one run; `play` is the work a model pool runs for each."""

    catalog: Catalog
    config: RunConfig
    #: family -> the calibration its verdicts are mapped with
    calibrations: dict[str, CalibrationRecord]
    #: set from outside (Ctrl-C): episodes not yet started are left for --resume
    stop: StopRequest = field(default_factory=StopRequest)

    async def play(self, planned: PlannedEpisode, scheduler: Scheduler) -> EpisodeRecord | None:
        """The episode's record (None when a stop was asked before it started); an episode that
        fails is recorded as failed, never raised."""
        config = self.config
        if self.stop.requested:  # asked to stop: episodes not yet started are left for --resume
            return None
        support = config.support_models()
        ctx = EpisodeContext(
            episode_id=planned.episode_id,
            seed=planned.seed,
            scheduler=scheduler,
            roles=episode_roles(
                self.catalog, planned.player, planned.partner, support, config.panel.judges, planned.table
            ),
            table=planned.table,
            exclude_self_judging=config.exclude_self_judging,
            likelihood_template=config.panel.likelihood_template_or_none,
            calibrated_features=calibrated_features(planned.family, self.calibrations),
            force_greedy=config.greedy,
            unsafe_code_execution=config.unsafe_code_execution,
            max_turns=turns_for(config, planned.family),
            max_reply_tokens=reply_cap_for(config, planned.family),
            seed_key=planned.key.seed_key,
        )
        started_at = datetime.now(UTC).replace(tzinfo=None)
        clock = time.perf_counter()
        error: str | None = None
        try:
            await planned.family.play(ctx, planned.instance, list(config.panel.judges), config.panel.name)
        except EpisodeFailed as failure:
            error = str(failure)
        except Exception as failure:  # an episode's bug must not take the run down
            error = f"{type(failure).__name__}: {failure}"
        scores = ctx.scores
        if error is None:
            scores = calibrated_scores(planned.family, scores, ctx.judgments, self.calibrations)
        return EpisodeRecord(
            episode_id=planned.episode_id,
            run_id=planned.key.run_id,
            scenario=planned.family.name,
            instance_id=planned.instance.id,
            player=planned.key.label,
            player_model=planned.player,
            partner_model=planned.partner,
            status="finished" if error is None else "error",
            seed=planned.seed,
            started_at=started_at,
            finished_at=datetime.now(UTC).replace(tzinfo=None),
            wall_s=time.perf_counter() - clock,
            error=error,
            metadata={"language": planned.instance.language, **planned.instance.describe(), **ctx.metadata},
            messages=ctx.messages,
            judgments=ctx.judgments,
            scores=scores,
        )


#: what the runner hears of each played episode (None: a stop was asked before it started); it may
#: hand back episodes it opens (a staged family's next stage), which are played in the same go
OnPlayed = OnResult[PlannedEpisode, EpisodeRecord | None]


class Players(Protocol):
    """Where a run's episodes are played: this process (`LocalPlayers`) or a cluster's workers."""

    def play(self, episodes: Sequence[PlannedEpisode], on_result: OnPlayed) -> list[EpisodeRecord | None]: ...

    def counters(self) -> list[BackendCounters]: ...

    def played(self) -> dict[str, int]:
        """Episodes each worker played (empty in one process)."""
        ...

    def lost(self) -> list[str]:
        """Workers that died during the run (their unfinished episodes were played by others)."""
        ...

    def __enter__(self) -> Players: ...

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None: ...


class Cluster(Protocol):
    """Machines other than this process that play a run's episodes (`appliance.cluster`): the runner asks
    one for its players and stores its description, and never imports what it runs on."""

    def describe(self) -> str: ...

    def players(
        self,
        catalog: Catalog,
        models: list[str],
        player: EpisodePlayer,
        backend_factory: BackendFactory,
        on_worker: Callable[[str, int], None] | None,
    ) -> Players: ...


class LocalPlayers:
    """One process: one model pool plays every episode."""

    def __init__(self, pool: ModelPool, player: EpisodePlayer) -> None:
        self.pool = pool
        self.player = player

    def play(self, episodes: Sequence[PlannedEpisode], on_result: OnPlayed) -> list[EpisodeRecord | None]:
        return self.pool.play(episodes, self.player.play, on_result)

    def counters(self) -> list[BackendCounters]:
        return self.pool.counters()

    def played(self) -> dict[str, int]:
        return {}

    def lost(self) -> list[str]:
        return []

    def __enter__(self) -> LocalPlayers:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.pool.close()
