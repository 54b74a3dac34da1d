"""The runner: plans episodes, loads backends, plays episodes, stores each one.

Episode ids are derived from the run id, family, instance and player, so a
killed run can be resumed: finished episodes are in the store and skipped.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from appliance.calibration.apply import pick_calibrations
from appliance.catalog.models import Catalog, ModelSpec, sha256_of, sha256_of_tree
from appliance.engine.backend import did_not_fit
from appliance.engine.factory import open_backend
from appliance.episodes.client import derive_seed
from appliance.episodes.context import EpisodeKey, pair_label, table_label
from appliance.episodes.pool import ModelPool
from appliance.episodes.roles import BackendFactory
from appliance.errors import ApplianceError
from appliance.paths import project_root
from appliance.run.interrupts import RunInterrupted, StopRequest
from appliance.run.playing import Cluster, EpisodePlayer, LocalPlayers, PlannedEpisode, Players
from appliance.run_config import RunConfig
from appliance.sandbox.isolation import kernel_isolation_problem
from appliance.scenario_spec import family_of
from appliance.scenarios import load_run_family
from appliance.scenarios.base import Family, Instance, JudgedFamily, ScenarioFamily
from appliance.sharding import ShardDeal
from appliance.store import EpisodeRecord, ModelRecord, RunRecord, Store
from appliance.store.labels import get_calibration
from appliance.store.records import CalibrationRecord
from appliance.store.repair import Reconciliation, reconcile_run, recover_run
from appliance.store.run_view import RunView


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
    #: episodes each cluster worker played (empty in one process)
    workers: dict[str, int] = field(default_factory=dict)
    #: of the failed episodes, those whose prompt did not fit their model's context (a limit of the model)
    episodes_not_fitting: int = 0
    #: cluster workers that died; their unfinished episodes were played by the others
    lost_workers: list[str] = field(default_factory=list)
    #: the store measured against the run's journal as the run ended: what was restored, or what could not be
    store_check: Reconciliation = field(default_factory=lambda: Reconciliation(""))


_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,119}")


def new_run_id(config: RunConfig) -> str:
    """A fresh id; a shard's is the plan's own, so that every shard of one plan names the same run."""
    if config.shard is not None:
        digest = hashlib.sha256(json.dumps(config.plan_fields(), sort_keys=True).encode()).hexdigest()
        return f"sharded-{digest[:12]}"
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def valid_run_id(run_id: str) -> str:
    """A run id the user chose (--run-id): plain characters, so it names files and shards alike."""
    if _RUN_ID.fullmatch(run_id) is None:
        raise ApplianceError(f"--run-id {run_id!r}: use letters, digits, '.', '_' and '-' (at most 120)")
    return run_id


def limit_for(config: RunConfig, family: ScenarioFamily) -> int | None:
    """The family's own limit where the run has one (quick suite, family default), else the run's."""
    return config.limits.get(family_of(family.name), config.limit)


def instances_for_run(family: Family, limit: int | None, seed: int) -> list[Instance]:
    """The instances a run plays first; a family may choose its own subset (SimulateBench keeps base profiles)."""
    played = family.stages()[0]
    return played.select_instances(played.instances(), limit, seed)


def check_support_roles(config: RunConfig, families: list[ScenarioFamily]) -> None:
    """Every support role a stage needs has a model; checked before anything is planned or stored."""
    supporting = config.support_models()
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


def prepare_stage(stage: ScenarioFamily, store: Store, run_id: str) -> ScenarioFamily:
    """A stage that builds its instances from earlier stages' stored episodes reads them now, read-only."""
    stage.prepare(RunView(store, run_id, stage.name))
    return stage


def plan_episodes(run_id: str, config: RunConfig, families: list[ScenarioFamily]) -> list[PlannedEpisode]:
    planned: list[PlannedEpisode] = []
    support = config.support_models()
    for family in families:
        for instance in family.select_instances(family.instances(), limit_for(config, family), config.seed):
            seed = derive_seed(config.seed, instance.id)
            table = family.table(list(config.players), instance)
            if table:
                key = EpisodeKey(run_id, family.name, instance.id, table_label(table))
                planned.append(PlannedEpisode(key, family, instance, table[0], seed, table[1], table))
                continue
            for player, partner in family.pairings(list(config.players), support, instance, config.cross_play):
                key = EpisodeKey(run_id, family.name, instance.id, pair_label(player, partner))
                planned.append(PlannedEpisode(key, family, instance, player, seed, partner))
    return planned


def models_needed(config: RunConfig, families: list[ScenarioFamily]) -> list[str]:
    names = list(config.players)
    supporting = config.support_models()
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


def _model_change(stored: ModelRecord, current: ModelRecord) -> str:
    """What differs between a model as a run recorded it and as the catalog gives it now ("" if nothing)."""
    for field_name in ("backend", "path", "sha256"):
        if getattr(stored, field_name) != getattr(current, field_name):
            return f"{field_name} {getattr(stored, field_name)} -> {getattr(current, field_name)}"
    keys = sorted(set(stored.parameters) | set(current.parameters))
    differing = [key for key in keys if stored.parameters.get(key) != current.parameters.get(key)]
    return f"{', '.join(differing)} changed" if differing else ""


def file_hashes(catalog: Catalog, families: list[ScenarioFamily]) -> dict[str, str]:
    files = [catalog.source, *(path for family in families for path in family.data_files())]
    return {str(path): sha256_of(path, use_cache=False) for path in files if path.is_file()}


def _edited_since(stored: dict[str, str], families: list[Family]) -> list[str]:
    """The families' data files whose content differs from what the run read when it started (a file
    the run did not read, or read under another path, is not compared)."""
    stages = [stage for family in families for stage in family.stages()]
    paths = {str(path): path for stage in stages for path in stage.data_files()}
    return sorted(
        name
        for name, path in paths.items()
        if name in stored and (not path.is_file() or sha256_of(path, use_cache=False) != stored[name])
    )


class Runner:
    """Plays a run's episodes through the scheduler and writes each to the store."""

    def __init__(
        self,
        catalog: Catalog,
        store: Store,
        backend_factory: BackendFactory = open_backend,
        stop: StopRequest | None = None,
        cluster: Cluster | None = None,
        on_worker: Callable[[str, int], None] | None = None,
    ) -> None:
        """`cluster`: play the episodes elsewhere (Ray workers: `appliance.cluster.ray_cluster.ClusterOptions`);
        `on_worker(name, pid)` as each is ready."""
        self.catalog = catalog
        self.store = store
        self.backend_factory = backend_factory
        #: set from outside (Ctrl-C) to start no new episode; the run then ends as interrupted
        self.stop = stop or StopRequest()
        self.cluster = cluster
        self.on_worker = on_worker
        self._calibrations: dict[str, CalibrationRecord] = {}
        self._live: Players | None = None

    def _players(self, names: list[str], player: EpisodePlayer) -> Players:
        """Where the episodes are played, every model loaded (nothing is stored before this)."""
        if self.cluster is None or not names:
            pool = ModelPool.load(
                self.catalog, names, parallel=player.config.parallel, backend_factory=self.backend_factory
            )
            return LocalPlayers(pool, player)
        return self.cluster.players(self.catalog, names, player, self.backend_factory, self.on_worker)

    def played_by_worker(self) -> dict[str, int]:
        """While a run plays on a cluster: the episodes each worker has played so far (else empty)."""
        return {} if self._live is None else self._live.played()

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
        # the backend's options flat among the others, as models.toml writes them
        parameters: dict[str, Any] = spec.model_dump(mode="json", exclude={"name", "backend", "options"})
        parameters |= spec.options.model_dump(mode="json")
        adapter = self.catalog.resolve_adapter(spec)
        if adapter is not None:  # a retrained adapter at the same path is another model
            parameters["adapter_sha256"] = sha256_of_tree(adapter)
        return ModelRecord(name=spec.name, backend=spec.backend, path=str(path), sha256=digest, parameters=parameters)

    def execute(
        self,
        config: RunConfig,
        families: list[Family],
        *,
        run_id: str | None = None,
        on_episode: Callable[[EpisodeRecord], None] | None = None,
        on_plan: Callable[[str, int], None] | None = None,
    ) -> RunSummary:
        """Play a new run (named `run_id` where given). Models are loaded before anything is written,
        so a model that fails to load leaves the store exactly as it was."""
        picked = pick_calibrations(self.store, config.panel, families)
        settings = dict(config.families)  # the options the plan set, and now what each family resolved
        for family in families:
            if snapshot := family.settings_snapshot():
                settings[family.name] = config.family_settings(family.name).model_copy(update={"snapshot": snapshot})
        config = config.model_copy(
            update={
                "calibrations": {f: r.calibration_id for f, r in picked.items()},
                "families": settings,
                "cluster": None if self.cluster is None else self.cluster.describe(),
            }
        )
        run_id = new_run_id(config) if run_id is None else valid_run_id(run_id)
        if self.store.has_run(run_id):
            raise ApplianceError(
                f"run {run_id}: {self.store.path} already holds it (resume it with --resume {run_id}, "
                "or name a new one with --run-id)"
            )
        return self._play_run(run_id, config, families, False, on_episode, on_plan)

    def resume(
        self,
        run_id: str,
        *,
        on_episode: Callable[[EpisodeRecord], None] | None = None,
        on_plan: Callable[[str, int], None] | None = None,
    ) -> RunSummary:
        """Play the missing episodes of stored run `run_id` with the config it started with (its
        calibrations and family settings included). A model of the run whose catalog entry changed
        since is refused in one line: the resumed episodes would not be the run's."""
        recover_run(self.store, run_id)  # what a kill left in the journal and not in the store
        config = self.store.run(run_id).run_config()
        changed = [
            f"'{stored.name}' ({what})"
            for stored in self.store.run_models(run_id)
            if (what := _model_change(stored, self._model_record(self.catalog.get(stored.name))))
        ]
        if changed:
            raise ApplianceError(
                f"--resume {run_id}: {self.catalog.source} changed model {', '.join(changed)} since the run "
                "started; resume with the models file the run started with"
            )
        families = [load_run_family(spec, config, self.store) for spec in config.scenarios]
        if edited := _edited_since(self.store.run_file_hashes(run_id), families):
            raise ApplianceError(
                f"--resume {run_id}: {', '.join(edited)} changed since the run started; the resumed episodes would "
                "not be the run's (restore the files, or start a new run)"
            )
        return self._play_run(run_id, config, families, True, on_episode, on_plan)

    def _play_run(
        self,
        run_id: str,
        config: RunConfig,
        families: list[Family],
        resumed: bool,
        on_episode: Callable[[EpisodeRecord], None] | None,
        on_plan: Callable[[str, int], None] | None,
    ) -> RunSummary:
        self.catalog.refuse_synthetic(config.role_models(), "a run")
        started = time.perf_counter()
        self._calibrations = {f: get_calibration(self.store, c) for f, c in config.calibrations.items()}
        chains = [family.stages() for family in families]
        stages = [stage for chain in chains for stage in chain]
        check_support_roles(config, stages)
        check_code_isolation(config, stages)
        with self.store.transaction():  # one state of the store; the file is let go before models load
            done = self.store.finished_episode_ids(run_id) if resumed else set()
            firsts = [prepare_stage(chain[0], self.store, run_id) for chain in chains]
            first_plan = plan_episodes(run_id, config, firsts)
        shard = config.shard_of_plan()
        deal = None if shard is None else ShardDeal(shard, (episode.lineage for episode in first_plan))
        first_plan = _kept(first_plan, deal)
        needs_models = len(stages) > len(chains) or any(episode.episode_id not in done for episode in first_plan)
        names = models_needed(config, stages) if needs_models else []
        progress = _Progress()
        player = EpisodePlayer(self.catalog, config, self._calibrations, self.stop)
        with self._players(names, player) as players:
            if not resumed:
                self._record_run(run_id, config, stages)
            status = "failed"
            try:
                self._live = players
                in_flight = _StagesInFlight(
                    self.store, self.stop, run_id, config, chains, deal, done, progress, on_plan, on_episode
                )
                todo = in_flight.start(first_plan)
                if todo:
                    played = players.play(todo, in_flight.played)
                    progress.records += [record for record in played if record is not None]
                if self.stop.requested:
                    raise RunInterrupted(run_id)
                status = "finished"
            except (KeyboardInterrupt, RunInterrupted):
                status = "interrupted"
                raise
            finally:
                self._live = None
                self.store.finish_run(run_id, status, time.perf_counter() - started)
            counters = players.counters()
            workers, lost = players.played(), players.lost()
        store_check = reconcile_run(self.store, run_id)  # a run never reports what the store does not hold
        finished = sum(1 for record in progress.records if record.status == "finished")
        return RunSummary(
            run_id=run_id,
            episodes_total=progress.planned,
            episodes_skipped=progress.skipped,
            episodes_finished=finished,
            episodes_failed=len(progress.records) - finished,
            episodes_not_fitting=sum(1 for r in progress.records if r.status != "finished" and did_not_fit(r.error)),
            wall_s=time.perf_counter() - started,
            prompt_tokens=sum(c.prompt_tokens for c in counters),
            cached_prompt_tokens=sum(c.cached_prompt_tokens for c in counters),
            completion_tokens=sum(c.completion_tokens for c in counters),
            workers=workers,
            lost_workers=lost,
            store_check=store_check,
        )


class _StagesInFlight:
    """Each family's stages in order, a stage planned as soon as its own family's previous stage is
    stored: a staged family (SimulBench's collect, extract, evaluate, compare) goes on while other
    families still play, instead of every family waiting at each stage for the slowest."""

    def __init__(
        self,
        store: Store,
        stop: StopRequest,
        run_id: str,
        config: RunConfig,
        chains: list[list[ScenarioFamily]],
        deal: ShardDeal | None,
        done: set[str],
        progress: _Progress,
        on_plan: Callable[[str, int], None] | None,
        on_episode: Callable[[EpisodeRecord], None] | None,
    ) -> None:
        self.store, self.stop, self.run_id, self.config = store, stop, run_id, config
        self.chains, self.deal, self.done, self.progress = chains, deal, done, progress
        self.on_plan, self.on_episode = on_plan, on_episode
        #: stage -> (its chain's number, its place in the chain)
        self.place = {
            id(stage): (number, index) for number, chain in enumerate(chains) for index, stage in enumerate(chain)
        }
        #: chain number -> episodes of its current stage not yet back
        self.waiting_for = [0] * len(chains)

    def start(self, first_plan: list[PlannedEpisode]) -> list[PlannedEpisode]:
        """The first stages' episodes still to play, and those of any later stage that has nothing to
        wait for (a resumed run whose first stages are stored). The longest chains start first: their
        later stages wait on them, so a staged family left behind the one-stage families would end
        the run alone."""
        todo = sorted(self._admit(first_plan), key=self._stages_left, reverse=True)
        for episode in todo:
            self.waiting_for[self.place[id(episode.family)][0]] += 1
        return todo + [episode for number in range(len(self.chains)) for episode in self._after(number, 0)]

    def _stages_left(self, episode: PlannedEpisode) -> int:
        number, index = self.place[id(episode.family)]
        return len(self.chains[number]) - index

    def played(self, planned: PlannedEpisode, record: EpisodeRecord | None) -> list[PlannedEpisode]:
        """Store the episode; the last of its stage opens its family's next stage (what it returns)."""
        if record is not None:
            self.store.write_episode(record)
            if self.on_episode is not None:
                self.on_episode(record)
        number, index = self.place[id(planned.family)]
        self.waiting_for[number] -= 1
        return self._after(number, index)

    def _after(self, number: int, index: int) -> list[PlannedEpisode]:
        """The episodes of chain `number`'s first stage after `index` that has any to play, once the
        chain waits for nothing (none once a stop is asked)."""
        if self.waiting_for[number]:
            return []
        for stage in self.chains[number][index + 1 :]:
            if self.stop.requested:
                return []
            with self.store.transaction():
                planned = plan_episodes(self.run_id, self.config, [prepare_stage(stage, self.store, self.run_id)])
                todo = self._admit(_kept(planned, self.deal))
            if todo:
                self.waiting_for[number] = len(todo)
                return todo
        return []

    def _admit(self, planned: list[PlannedEpisode]) -> list[PlannedEpisode]:
        """Count the planned episodes (stored for progress) and drop those a resumed run has."""
        todo = [episode for episode in planned if episode.episode_id not in self.done]
        self.progress.planned += len(planned)
        self.progress.skipped += len(planned) - len(todo)
        self.store.set_planned(self.run_id, self.progress.planned)
        if self.on_plan is not None:
            self.on_plan(self.run_id, self.progress.planned - self.progress.skipped)
        return todo


def _kept(planned: list[PlannedEpisode], deal: ShardDeal | None) -> list[PlannedEpisode]:
    """The episodes a shard plays (all of them, unsharded)."""
    return planned if deal is None else [episode for episode in planned if deal.keeps(episode.lineage)]


@dataclass
class _Progress:
    """What one execution planned, skipped and played."""

    planned: int = 0
    skipped: int = 0
    records: list[EpisodeRecord] = field(default_factory=list)
