"""The runner: plans episodes, loads backends, plays episodes, stores each one.

Episode ids are derived from the run id, family, instance and player, so a
killed run can be resumed: finished episodes are in the store and skipped.
"""

from __future__ import annotations

import asyncio
import platform
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from appliance.calibration.apply import calibrated_scores, pick_calibrations
from appliance.catalog import Catalog, ModelSpec, sha256_of
from appliance.engine.backend import Backend
from appliance.engine.factory import open_backend
from appliance.episodes import EpisodeContext, EpisodeFailed, derive_seed, pair_label, table_label
from appliance.errors import ApplianceError
from appliance.interrupts import RunInterrupted, StopRequest
from appliance.judging.panels import Panel
from appliance.paths import project_root
from appliance.roles import BackendFactory, episode_roles
from appliance.sandbox.isolation import kernel_isolation_problem
from appliance.scenarios.base import Family, Instance, JudgedFamily, ScenarioFamily, SupportRole
from appliance.scheduler import Scheduler
from appliance.store import EpisodeRecord, ModelRecord, RunRecord, Store
from appliance.store.labels import get_calibration
from appliance.store.records import CalibrationRecord
from appliance.store.run_view import RunView


class RunConfig(BaseModel):
    """Everything that decides what a run does; stored with the run."""

    model_config = ConfigDict(extra="forbid")

    scenarios: list[str]
    players: list[str] = Field(min_length=1)
    interrogator: str
    panel: Panel
    seed: int = 0
    limit: int | None = Field(default=None, ge=1)
    #: per-family instance limits (the quick suite's, or a family's own default); a family not named here
    #: uses `limit`
    limits: dict[str, int] = Field(default_factory=dict)
    #: the quick suite (`appliance run` with no --scenario): its limits and turn caps shorten the methods
    quick: bool = False
    #: per-family turn caps (the quick suite's); a family not named here uses `turns`
    turn_caps: dict[str, int] = Field(default_factory=dict)
    parallel: int = Field(default=8, ge=1)
    models_file: str
    greedy: bool = False
    turns: int | None = Field(default=None, ge=1)
    #: two-player games also pair every player with every other one, in both roles
    cross_play: bool = False
    #: a judge's verdicts on its own model's outputs are left out (families that rate players' outputs)
    exclude_self_judging: bool = False
    #: the fixed model that answers SimulBench's user agent while dialogues are collected (required for SimulBench)
    simulator: str | None = None
    #: model-written code may run without kernel isolation (--unsafe-code-execution; reports say so)
    unsafe_code_execution: bool = False
    #: family -> calibration id applied to its verdicts (chosen when the run starts)
    calibrations: dict[str, str] = Field(default_factory=dict)
    #: family -> the settings it played with (set when the run starts; its report reads them)
    family_settings: dict[str, dict[str, Any]] = Field(default_factory=dict)


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
    #: every model of an N-player game (one episode seats them all); empty for pairings
    table: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return table_label(self.table) if self.table else pair_label(self.player, self.partner)


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


def limit_for(config: RunConfig, family: ScenarioFamily) -> int | None:
    """The family's own limit where the run has one (quick suite, family default), else the run's."""
    return config.limits.get(_registered_name(family), config.limit)


def turns_for(config: RunConfig, family: ScenarioFamily) -> int | None:
    """The family's quick-suite turn cap where the run has one, else the run's."""
    return config.turn_caps.get(_registered_name(family), config.turns)


def _registered_name(family: ScenarioFamily) -> str:
    """`pingpong` for a stage named `pingpong:imported/pingpong`: per-family settings are keyed by it."""
    return family.name.partition(":")[0]


def instances_for_run(family: Family, limit: int | None, seed: int) -> list[Instance]:
    """The instances a run plays first; a family may choose its own subset (SimulateBench keeps base profiles)."""
    played = family.stages()[0]
    return played.select_instances(played.instances(), limit, seed)


def check_support_roles(config: RunConfig, families: list[ScenarioFamily]) -> None:
    """Every support role a stage needs has a model; checked before anything is planned or stored."""
    supporting = support_role_models(config)
    for family in families:
        if "simulator" in family.support_roles and "simulator" not in supporting:
            raise ApplianceError(
                f"--simulator: {family.name} needs a fixed simulator model; name it with --simulator "
                "or set 'defaults.simulator' in models.toml"
            )


def check_code_isolation(config: RunConfig, families: list[ScenarioFamily]) -> None:
    """A family that runs model-written code needs the kernel's isolation, or the user's explicit
    --unsafe-code-execution; checked before anything is planned or stored."""
    runners = [family.name for family in families if family.runs_model_code]
    if not runners or config.unsafe_code_execution:
        return
    problem = kernel_isolation_problem()
    if problem is not None:
        raise ApplianceError(
            f"{runners[0]} runs model-written code and cannot isolate it: {problem} "
            "(or pass --unsafe-code-execution to run it without kernel isolation)"
        )


def support_role_models(config: RunConfig) -> dict[SupportRole, str]:
    """The model bound to each support role. The user agent is the run's model playing the user.

    SimulBench's simulator is a fixed model named by the run (or models.toml), never a player by
    default: it is absent here until one is named.
    """
    roles: dict[SupportRole, str] = {"interrogator": config.interrogator, "user_agent": config.interrogator}
    if config.simulator is not None:
        roles["simulator"] = config.simulator
    return roles


def run_phases(families: list[Family]) -> list[list[ScenarioFamily]]:
    """Families played in order: plain families all in the first phase; a staged family's stage k in phase k."""
    phases: list[list[ScenarioFamily]] = [[]]
    for family in families:
        stages = family.stages()
        while len(phases) < len(stages):
            phases.append([])
        for phase, stage in zip(phases, stages, strict=False):
            phase.append(stage)
    return [phase for phase in phases if phase]


def prepare_phase(phase: list[ScenarioFamily], store: Store, run_id: str) -> list[ScenarioFamily]:
    """Stages that build their instances from earlier stages' stored episodes read them now, read-only."""
    for stage in phase:
        stage.prepare(RunView(store, run_id, stage.name))
    return phase


def plan_episodes(run_id: str, config: RunConfig, families: list[ScenarioFamily]) -> list[PlannedEpisode]:
    planned: list[PlannedEpisode] = []
    support = support_role_models(config)
    for family in families:
        for instance in family.select_instances(family.instances(), limit_for(config, family), config.seed):
            seed = derive_seed(config.seed, instance.id)
            table = family.table(list(config.players), instance)
            if table:
                episode_id = f"{run_id}:{family.name}:{instance.id}:{table_label(table)}"
                planned.append(PlannedEpisode(run_id, episode_id, family, instance, table[0], seed, table[1], table))
                continue
            for player, partner in family.pairings(list(config.players), support, instance, config.cross_play):
                episode_id = f"{run_id}:{family.name}:{instance.id}:{pair_label(player, partner)}"
                planned.append(PlannedEpisode(run_id, episode_id, family, instance, player, seed, partner))
    return planned


def episode_seed_key(scenario: str, instance_id: str, label: str) -> str:
    """An episode's identity across runs (its id without the run id): request seeds derive from it."""
    return f"{scenario}:{instance_id}:{label}"


def role_models(config: RunConfig) -> list[str]:
    """Every model the config names for a role: players, support roles and judges."""
    return [*config.players, *support_role_models(config).values(), *config.panel.judges]


def models_needed(config: RunConfig, families: list[ScenarioFamily]) -> list[str]:
    names = list(config.players)
    supporting = support_role_models(config)
    names += [supporting[role] for family in families for role in family.support_roles]
    if any(isinstance(family, JudgedFamily) for family in families):  # rule-scored families need no judge
        names.extend(config.panel.judges)
    return list(dict.fromkeys(names))


RUN_PACKAGES = ("appliance", "llama-cpp-python", "duckdb", "pydantic", "typer", "numpy")


def package_versions(packages: tuple[str, ...] = RUN_PACKAGES) -> dict[str, str]:
    """Python's and `packages`' versions, as recorded with a run or a bench."""
    versions = {"python": platform.python_version()}
    for package in packages:
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

    def __init__(
        self,
        catalog: Catalog,
        store: Store,
        backend_factory: BackendFactory = open_backend,
        stop: StopRequest | None = None,
    ) -> None:
        self.catalog = catalog
        self.store = store
        self.backend_factory = backend_factory
        #: set from outside (Ctrl-C) to start no new episode; the run then ends as interrupted
        self.stop = stop or StopRequest()
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
        self.catalog.refuse_synthetic(role_models(config), "a run")
        started = time.perf_counter()
        run_id = resume or new_run_id()
        if resume is None:
            picked = pick_calibrations(self.store, config.panel, families)
            snapshots = {family.name: family.settings_snapshot() for family in families}
            config = config.model_copy(
                update={
                    "calibrations": {f: r.calibration_id for f, r in picked.items()},
                    "family_settings": {name: snapshot for name, snapshot in snapshots.items() if snapshot},
                }
            )
        else:  # a resumed run keeps what it chose when it started, whatever the caller's config says
            stored = RunConfig(**self.store.run(resume)["config"])
            config = config.model_copy(
                update={"calibrations": stored.calibrations, "family_settings": stored.family_settings}
            )
        self._calibrations = {f: get_calibration(self.store, c) for f, c in config.calibrations.items()}
        phases = run_phases(families)
        check_support_roles(config, [stage for phase in phases for stage in phase])
        check_code_isolation(config, [stage for phase in phases for stage in phase])
        done = self.store.finished_episode_ids(run_id) if resume else set()
        first_plan = plan_episodes(run_id, config, prepare_phase(phases[0], self.store, run_id))
        needs_models = len(phases) > 1 or any(episode.episode_id not in done for episode in first_plan)
        self.store.release()  # loading models takes a while; others may use the store meanwhile
        backends = self._open_backends(config, phases) if needs_models else {}
        progress = _Progress()
        try:
            if resume is None:
                self._record_run(run_id, config, [stage for phase in phases for stage in phase])
            status = "failed"
            try:
                self._play_phases(run_id, config, phases, first_plan, done, backends, progress, on_episode, on_plan)
                if self.stop.requested:
                    raise RunInterrupted(run_id)
                status = "finished"
            except (KeyboardInterrupt, RunInterrupted):
                status = "interrupted"
                raise
            finally:
                self.store.finish_run(run_id, status, time.perf_counter() - started)
                self.store.release()
        finally:
            counters = [backend.counters for backend in backends.values()]
            for backend in backends.values():
                backend.close()
        finished = sum(1 for record in progress.records if record.status == "finished")
        return RunSummary(
            run_id=run_id,
            episodes_total=progress.planned,
            episodes_skipped=progress.skipped,
            episodes_finished=finished,
            episodes_failed=len(progress.records) - finished,
            wall_s=time.perf_counter() - started,
            prompt_tokens=sum(c.prompt_tokens for c in counters),
            cached_prompt_tokens=sum(c.cached_prompt_tokens for c in counters),
            completion_tokens=sum(c.completion_tokens for c in counters),
        )

    def _open_backends(self, config: RunConfig, phases: list[list[ScenarioFamily]]) -> dict[str, Backend]:
        """Every model the run needs, loaded before anything is stored; a failed load closes the others."""
        backends: dict[str, Backend] = {}
        try:
            for name in models_needed(config, [stage for phase in phases for stage in phase]):
                backends[name] = self.backend_factory(self.catalog, self.catalog.get(name), parallel=config.parallel)
        except BaseException:
            for backend in backends.values():
                backend.close()
            raise
        return backends

    def _play_phases(
        self,
        run_id: str,
        config: RunConfig,
        phases: list[list[ScenarioFamily]],
        first_plan: list[PlannedEpisode],
        done: set[str],
        backends: dict[str, Backend],
        progress: _Progress,
        on_episode: Callable[[EpisodeRecord], None] | None,
        on_plan: Callable[[str, int], None] | None,
    ) -> None:
        """Each phase is planned once the one before it is stored (its stages may read those episodes)."""
        for index, phase in enumerate(phases):
            if self.stop.requested:
                return
            planned = (
                first_plan if index == 0 else plan_episodes(run_id, config, prepare_phase(phase, self.store, run_id))
            )
            todo = [episode for episode in planned if episode.episode_id not in done]
            progress.planned += len(planned)
            progress.skipped += len(planned) - len(todo)
            self.store.set_planned(run_id, progress.planned)
            self.store.release()
            if on_plan is not None:
                on_plan(run_id, progress.planned - progress.skipped)
            if todo:
                progress.records += asyncio.run(self._play_all(todo, config, backends, on_episode))

    async def _play_all(
        self,
        todo: list[PlannedEpisode],
        config: RunConfig,
        backends: dict[str, Backend],
        on_episode: Callable[[EpisodeRecord], None] | None,
    ) -> list[EpisodeRecord]:
        scheduler = Scheduler(backends)
        limiter = asyncio.Semaphore(config.parallel)

        async def one(planned: PlannedEpisode) -> EpisodeRecord | None:
            async with limiter:
                if self.stop.requested:  # asked to stop: episodes not yet started are left for --resume
                    return None
                record = await self._play_one(planned, config, scheduler)
            self.store.write_episode(record)
            self.store.release()  # held only while writing: readers and other runs get their turn
            if on_episode is not None:
                on_episode(record)
            return record

        work = asyncio.gather(*(one(planned) for planned in todo))
        await scheduler.drive(work)
        return [record for record in await work if record is not None]

    async def _play_one(self, planned: PlannedEpisode, config: RunConfig, scheduler: Scheduler) -> EpisodeRecord:
        support = support_role_models(config)
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
            force_greedy=config.greedy,
            unsafe_code_execution=config.unsafe_code_execution,
            max_turns=turns_for(config, planned.family),
            seed_key=episode_seed_key(planned.family.name, planned.instance.id, planned.label),
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
            scores = calibrated_scores(planned.family, scores, ctx.judgments, self._calibrations)
        return EpisodeRecord(
            episode_id=planned.episode_id,
            run_id=planned.run_id,
            scenario=planned.family.name,
            instance_id=planned.instance.id,
            player=planned.label,
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


@dataclass
class _Progress:
    """What the phases of one execution planned, skipped and played."""

    planned: int = 0
    skipped: int = 0
    records: list[EpisodeRecord] = field(default_factory=list)
