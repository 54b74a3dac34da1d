"""The runner: plans episodes, loads backends, plays episodes, stores each one.

Episode ids are derived from the run id, family, instance and player, so a
killed run can be resumed: finished episodes are in the store and skipped.
"""

from __future__ import annotations

import asyncio
import platform
import random
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from appliance.calibration.apply import apply_calibration, pick_calibrations
from appliance.catalog import Catalog, ModelSpec, sha256_of
from appliance.engine.backend import Backend
from appliance.engine.factory import open_backend
from appliance.engine.types import Sampling
from appliance.episodes import EpisodeContext, EpisodeFailed, RoleBinding, derive_seed, pair_label
from appliance.judging.panels import Panel
from appliance.paths import project_root
from appliance.scenarios.base import Family, Instance, ScenarioFamily, StagedFamily
from appliance.scheduler import Scheduler
from appliance.store import EpisodeRecord, ModelRecord, RunRecord, Store
from appliance.store.labels import get_calibration
from appliance.store.records import CalibrationRecord


class BackendFactory(Protocol):
    def __call__(self, catalog: Catalog, spec: ModelSpec, *, parallel: int) -> Backend: ...


class RunConfig(BaseModel):
    """Everything that decides what a run does; stored with the run."""

    model_config = ConfigDict(extra="forbid")

    scenarios: list[str]
    players: list[str] = Field(min_length=1)
    interrogator: str
    panel: Panel
    seed: int = 0
    limit: int | None = Field(default=None, ge=1)
    parallel: int = Field(default=8, ge=1)
    models_file: str
    greedy: bool = False
    turns: int | None = Field(default=None, ge=1)
    #: two-player games also pair every player with every other one, in both roles
    cross_play: bool = False
    #: the fixed model that answers SimulBench's user agent while dialogues are collected (default: first player)
    simulator: str | None = None
    #: family -> calibration id applied to its verdicts (chosen when the run starts)
    calibrations: dict[str, str] = Field(default_factory=dict)


@dataclass(frozen=True)
class PlannedEpisode:
    run_id: str
    episode_id: str
    family: ScenarioFamily
    instance: Instance
    player: str
    seed: int
    #: the model in the partner roles of two-player games (the player itself in self-play)
    partner: str

    @property
    def label(self) -> str:
        return pair_label(self.player, self.partner)


@dataclass
class RunSummary:
    run_id: str
    episodes_total: int
    episodes_skipped: int
    episodes_finished: int
    episodes_failed: int
    wall_s: float
    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: int


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def select_instances(instances: list[Instance], limit: int | None, seed: int) -> list[Instance]:
    """A seeded sample, so a limited run still covers cards, situations and languages."""
    chosen = list(instances)
    random.Random(seed).shuffle(chosen)
    return chosen if limit is None else chosen[:limit]


def first_stage(family: Family) -> ScenarioFamily:
    """What a run plays first: the family itself, or a staged family's first stage."""
    return family.stages()[0] if isinstance(family, StagedFamily) else family


def instances_for_run(family: Family, limit: int | None, seed: int) -> list[Instance]:
    """The instances a run plays first; a family may choose its own subset (SimulateBench keeps base profiles)."""
    played = first_stage(family)
    select = getattr(played, "select_instances", select_instances)
    return list(select(played.instances(), limit, seed))


def support_models(config: RunConfig) -> dict[str, str]:
    """The model bound to each support role. The user agent is the run's model playing the user."""
    return {
        "interrogator": config.interrogator,
        "user_agent": config.interrogator,
        "simulator": config.simulator or config.players[0],
    }


def run_phases(families: list[Family]) -> list[list[ScenarioFamily]]:
    """Families played in order: plain families all in the first phase; a staged family's stage k in phase k."""
    phases: list[list[ScenarioFamily]] = [[]]
    for family in families:
        stages = family.stages() if isinstance(family, StagedFamily) else [family]
        while len(phases) < len(stages):
            phases.append([])
        for phase, stage in zip(phases, stages, strict=False):
            phase.append(stage)
    return [phase for phase in phases if phase]


def prepare_phase(phase: list[ScenarioFamily], store: Store, run_id: str) -> list[ScenarioFamily]:
    """Stages that build their instances from earlier stages' stored episodes read them now."""
    for family in phase:
        prepare = getattr(family, "prepare", None)
        if prepare is not None:
            prepare(store, run_id)
    return phase


def pairings(config: RunConfig, family: ScenarioFamily, instance: Instance) -> list[tuple[str, str]]:
    """(player, partner) pairs: self-play for everyone, and with `cross_play` every ordered pair of
    distinct players in the games a family marks as two-player. A family may choose its own
    (`pairings(players, support_models)`: SimulBench collects with one fixed simulator)."""
    own = getattr(family, "pairings", None)
    if own is not None:
        return list(own(list(config.players), support_models(config)))
    pairs = [(player, player) for player in config.players]
    two_player = getattr(family, "two_player", None)
    if config.cross_play and two_player is not None and two_player(instance):
        pairs += [(a, b) for a in config.players for b in config.players if a != b]
    return pairs


def plan_episodes(run_id: str, config: RunConfig, families: list[ScenarioFamily]) -> list[PlannedEpisode]:
    planned: list[PlannedEpisode] = []
    for family in families:
        for instance in instances_for_run(family, config.limit, config.seed):
            for player, partner in pairings(config, family, instance):
                episode_id = f"{run_id}:{family.name}:{instance.id}:{pair_label(player, partner)}"
                seed = derive_seed(config.seed, instance.id)
                planned.append(PlannedEpisode(run_id, episode_id, family, instance, player, seed, partner))
    return planned


def models_needed(config: RunConfig, families: list[ScenarioFamily]) -> list[str]:
    names = list(config.players)
    supporting = support_models(config)
    names += [supporting[role] for family in families for role in family.support_roles]
    if any(family.judge_template for family in families):  # rule-scored families need no judge
        names.extend(config.panel.judges)
    return list(dict.fromkeys(names))


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("appliance", "llama-cpp-python", "duckdb", "pydantic", "typer", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def git_revision() -> str | None:
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=project_root(), capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def file_hashes(catalog: Catalog, families: list[ScenarioFamily]) -> dict[str, str]:
    files = [catalog.source, *(path for family in families for path in family.data_files())]
    return {str(path): sha256_of(path, use_cache=False) for path in files if path.is_file()}


class Runner:
    """Plays a run's episodes through the scheduler and writes each to the store."""

    def __init__(self, catalog: Catalog, store: Store, backend_factory: BackendFactory = open_backend) -> None:
        self.catalog = catalog
        self.store = store
        self.backend_factory = backend_factory
        self._calibrations: dict[str, CalibrationRecord] = {}

    def _record_run(self, run_id: str, config: RunConfig, families: list[ScenarioFamily]) -> None:
        models = [self._model_record(self.catalog.get(name)) for name in models_needed(config, families)]
        self.store.create_run(
            RunRecord(
                run_id=run_id,
                started_at=datetime.now(UTC).replace(tzinfo=None),
                seed=config.seed,
                config=config.model_dump(mode="json"),
                versions=package_versions(),
                git_revision=git_revision(),
                file_hashes=file_hashes(self.catalog, families),
            ),
            models,
        )

    def _model_record(self, spec: ModelSpec) -> ModelRecord:
        path = self.catalog.resolve_path(spec)
        digest = sha256_of(path) if path.is_file() else "missing"
        parameters: dict[str, Any] = spec.model_dump(mode="json", exclude={"name", "backend"})
        return ModelRecord(name=spec.name, backend=spec.backend, path=str(path), sha256=digest, parameters=parameters)

    def execute(
        self,
        config: RunConfig,
        families: list[Family],
        *,
        resume: str | None = None,
        on_episode: Callable[[EpisodeRecord], None] | None = None,
        on_plan: Callable[[str, int], None] | None = None,
    ) -> RunSummary:
        """Play a new run, or the missing episodes of run `resume`.

        Models are loaded before anything is written, so a model that fails to
        load leaves the store exactly as it was.
        """
        started = time.perf_counter()
        run_id = resume or new_run_id()
        if resume is None:
            picked = pick_calibrations(self.store, config.panel, families)
            config = config.model_copy(update={"calibrations": {f: r.calibration_id for f, r in picked.items()}})
        self._calibrations = {f: get_calibration(self.store, c) for f, c in config.calibrations.items()}
        phases = run_phases(families)
        every_family = [family for phase in phases for family in phase]
        done = self.store.finished_episode_ids(run_id) if resume else set()
        first_plan = plan_episodes(run_id, config, prepare_phase(phases[0], self.store, run_id))
        todo = [episode for episode in first_plan if episode.episode_id not in done]
        planned_total = skipped = 0
        records: list[EpisodeRecord] = []
        backends: dict[str, Backend] = {}
        try:
            if todo or len(phases) > 1:
                for name in models_needed(config, every_family):
                    backends[name] = self.backend_factory(
                        self.catalog, self.catalog.get(name), parallel=config.parallel
                    )
            if resume is None:
                self._record_run(run_id, config, every_family)
            status = "failed"
            try:
                for index, phase in enumerate(phases):
                    planned = first_plan
                    if index > 0:
                        planned = plan_episodes(run_id, config, prepare_phase(phase, self.store, run_id))
                        todo = [episode for episode in planned if episode.episode_id not in done]
                    planned_total += len(planned)
                    skipped += len(planned) - len(todo)
                    if on_plan is not None:
                        on_plan(run_id, planned_total - skipped)
                    if todo:
                        records += asyncio.run(self._play_all(todo, config, backends, on_episode))
                status = "finished"
            except KeyboardInterrupt:
                status = "interrupted"
                raise
            finally:
                self.store.finish_run(run_id, status, time.perf_counter() - started)
        finally:
            counters = [backend.counters for backend in backends.values()]
            for backend in backends.values():
                backend.close()
        finished = sum(1 for record in records if record.status == "finished")
        return RunSummary(
            run_id=run_id,
            episodes_total=planned_total,
            episodes_skipped=skipped,
            episodes_finished=finished,
            episodes_failed=len(records) - finished,
            wall_s=time.perf_counter() - started,
            prompt_tokens=sum(c.prompt_tokens for c in counters),
            cached_prompt_tokens=sum(c.cached_prompt_tokens for c in counters),
            completion_tokens=sum(c.completion_tokens for c in counters),
        )

    async def _play_all(
        self,
        todo: list[PlannedEpisode],
        config: RunConfig,
        backends: dict[str, Backend],
        on_episode: Callable[[EpisodeRecord], None] | None,
    ) -> list[EpisodeRecord]:
        scheduler = Scheduler(backends)
        limiter = asyncio.Semaphore(config.parallel)

        async def one(planned: PlannedEpisode) -> EpisodeRecord:
            async with limiter:
                record = await self._play_one(planned, config, scheduler)
            self.store.write_episode(record)
            if on_episode is not None:
                on_episode(record)
            return record

        work = asyncio.gather(*(one(planned) for planned in todo))
        await scheduler.drive(work)
        return list(await work)

    async def _play_one(self, planned: PlannedEpisode, config: RunConfig, scheduler: Scheduler) -> EpisodeRecord:
        roles = {
            "player": self._binding(planned.player, "player"),
            "partner": self._binding(planned.partner, "player"),
        }
        for role, model in support_models(config).items():
            roles[role] = self._binding(model, role)
        for judge in config.panel.judges:
            roles[f"judge:{judge}"] = self._binding(judge, "judge")
        ctx = EpisodeContext(
            episode_id=planned.episode_id,
            seed=planned.seed,
            scheduler=scheduler,
            roles=roles,
            force_greedy=config.greedy,
            max_turns=config.turns,
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
        calibration = self._calibrations.get(planned.family.name)
        if calibration is not None and error is None and planned.family.calibrated_metric:
            scores = apply_calibration(scores, ctx.judgments, calibration, planned.family.calibrated_metric)
        return EpisodeRecord(
            episode_id=planned.episode_id,
            run_id=planned.run_id,
            scenario=planned.family.name,
            instance_id=planned.instance.id,
            player=planned.label,
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

    def _binding(self, model: str, role: str) -> RoleBinding:
        return bind_role(self.catalog, model, role)


def bind_role(catalog: Catalog, model: str, role: str) -> RoleBinding:
    """A role played by `model`, with its sampling defaults and per-role overrides from models.toml."""
    spec = catalog.get(model)
    return RoleBinding(model=model, model_sampling=spec.sampling, role_override=spec.roles.get(role, Sampling()))
