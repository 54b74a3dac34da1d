"""`appliance merge`: the stores of a plan's shards joined into one run, as the unsharded run stores it.

Every shard (`appliance run --shard I/N`) stores the same run, under one id derived from the plan,
with its share of the episodes. A merge first reads every shard and checks that they are shards of
one plan (the same config, models, files and versions; each shard once, none missing; every one
finished), then writes the run, its models, every episode, the calibrations the run names and the
shards' instance sets into the target in one transaction, through the store's own journaled writes. So a
refused merge writes nothing, and a merged store checks and repairs like any other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError
from appliance.run_config import RunConfig
from appliance.sharding import Shard
from appliance.store.instance_sets import write_instance_set
from appliance.store.labels import get_calibration, store_if_missing
from appliance.store.records import (
    CalibrationRecord,
    EpisodeRecord,
    JudgmentRecord,
    MessageRecord,
    ModelRecord,
    RunRecord,
    ScoreRecord,
)
from appliance.store.repair import Reconciliation, reconcile_run
from appliance.store.store import Store


@dataclass
class ShardRun:
    """One shard as its store holds it."""

    path: Path
    shard: Shard
    run: RunRecord
    wall_s: float
    planned: int
    models: list[ModelRecord]
    episodes: list[EpisodeRecord]
    calibrations: list[CalibrationRecord]
    instance_sets: list[dict[str, Any]]


@dataclass
class MergeSummary:
    run_id: str
    into: str
    #: shard "I/N" -> its store and its episode count
    shards: dict[str, dict[str, Any]] = field(default_factory=dict)
    episodes: int = 0
    #: the target measured against the merged run's journal
    store_check: Reconciliation = field(default_factory=lambda: Reconciliation(""))


def merge_shards(sources: list[Path], into: Path, run_id: str | None = None) -> MergeSummary:
    """Join the shards stored in `sources` into run `run_id` (default: the one sharded run they hold)
    of store `into`; refused in one line, with nothing written, unless they make one whole plan."""
    if not sources:
        raise ApplianceError("merge: name the shards' stores")
    shards = [read_shard(path, run_id) for path in sources]
    _check_one_plan(shards)
    first = shards[0]
    with Store.open(into) as target:
        if target.has_run(first.run.run_id):
            raise ApplianceError(f"{into}: already holds run {first.run.run_id}; merge into another store")
        with target.transaction():
            for calibration in {c.calibration_id: c for s in shards for c in s.calibrations}.values():
                store_if_missing(target, calibration)
            for instance_set in {s["name"]: s for shard in shards for s in shard.instance_sets}.values():
                write_instance_set(target, **instance_set)
            config = RunConfig.model_validate(first.run.config).model_copy(update={"shard": None})
            run = first.run.model_copy(
                update={
                    "config": config.model_dump(mode="json"),
                    "started_at": min(shard.run.started_at for shard in shards),
                }
            )
            target.create_run(run, first.models)
            episodes = sorted((e for shard in shards for e in shard.episodes), key=lambda e: e.finished_at)
            target.write_episodes(episodes)
            target.set_planned(run.run_id, sum(shard.planned for shard in shards))
            # the shards ran side by side: the run took as long as its slowest shard
            finished_at = max((e.finished_at for e in episodes), default=run.started_at)
            target.finish_run(run.run_id, "finished", max(shard.wall_s for shard in shards), finished_at)
        store_check = reconcile_run(target, run.run_id)
    return MergeSummary(
        run_id=first.run.run_id,
        into=str(into),
        shards={str(s.shard): {"db": str(s.path), "episodes": len(s.episodes)} for s in shards},
        episodes=len(episodes),
        store_check=store_check,
    )


def read_shard(path: Path, run_id: str | None) -> ShardRun:
    """The sharded run `run_id` of store `path` (or its only one), whole."""
    with Store.open(path, read_only=True) as store:
        sharded = [
            str(rid)
            for rid, config in store.query("SELECT run_id, config FROM runs ORDER BY started_at")
            if json.loads(config).get("shard")
        ]
        if run_id is None:
            if len(sharded) != 1:
                held = ", ".join(sharded) or "none"
                raise ApplianceError(f"{path}: holds {len(sharded)} sharded runs ({held}); name one with --run")
            run_id = sharded[0]
        elif run_id not in sharded:
            raise ApplianceError(f"{path}: holds no shard of run '{run_id}'")
        stored = store.run(run_id)
        config = stored.run_config()
        shard = config.shard_of_plan()
        assert shard is not None
        if stored.status != "finished":
            raise ApplianceError(
                f"{path}: shard {shard} of run {run_id} is {stored.status}; finish it first: "
                f"appliance run --resume {run_id} --db {path}"
            )
        return ShardRun(
            path=path,
            shard=shard,
            run=_run_record(store, run_id),
            wall_s=float(stored.wall_s or 0.0),
            planned=int(stored.planned_episodes or 0),
            models=store.run_models(run_id),
            episodes=stored_episodes(store, run_id),
            calibrations=[get_calibration(store, c) for c in config.calibrations.values()],
            instance_sets=_instance_sets(store),
        )


def _check_one_plan(shards: list[ShardRun]) -> None:
    """Shards of one plan, each once, none missing; else one line naming the store and what differs."""
    first = shards[0]
    plan = _plan(first)
    seen: dict[int, Path] = {}
    for shard in shards:
        differs = next((key for key, value in _plan(shard).items() if value != plan[key]), None)
        if differs == "config":
            config, other = _plan(shard)["config"], plan["config"]
            differs = next(
                f"config field '{k}'" for k in sorted(set(config) | set(other)) if config.get(k) != other.get(k)
            )
        if differs is not None or shard.shard.count != first.shard.count:
            what = differs or "the number of shards"
            raise ApplianceError(
                f"{shard.path}: shard {shard.shard} is of another plan than {first.path}'s ({what} differs)"
            )
        if shard.shard.index in seen:
            raise ApplianceError(f"{shard.path}: shard {shard.shard} is also in {seen[shard.shard.index]}")
        seen[shard.shard.index] = shard.path
    missing = [f"{i}/{first.shard.count}" for i in range(1, first.shard.count + 1) if i not in seen]
    if missing:
        raise ApplianceError(f"merge: run {first.run.run_id} lacks shard {', '.join(missing)}")


def _plan(shard: ShardRun) -> dict[str, Any]:
    """What every shard of one plan stores alike; files by content, not by path (shards may run on
    machines with other checkouts and model folders)."""
    config = RunConfig.model_validate(shard.run.config)
    return {
        "config": config.plan_fields(),
        "models": sorted((m.name, m.backend, m.sha256, json.dumps(m.parameters, sort_keys=True)) for m in shard.models),
        "data files": sorted(shard.run.file_hashes.values()),
        "package versions": shard.run.versions,
        "git revision": shard.run.git_revision,
        "run id": shard.run.run_id,
    }


def _run_record(store: Store, run_id: str) -> RunRecord:
    (row,) = store.query(
        "SELECT run_id, started_at, seed, config, versions, git_revision, file_hashes FROM runs WHERE run_id = ?",
        [run_id],
    )
    run, started_at, seed, config, versions, revision, hashes = row
    return RunRecord(
        run_id=run,
        started_at=started_at,
        seed=seed,
        config=json.loads(config),
        versions=json.loads(versions),
        git_revision=revision,
        file_hashes=json.loads(hashes),
    )


_EPISODE_COLUMNS = (
    "episode_id, run_id, scenario, instance_id, player, status, seed, started_at, finished_at, wall_s, error, "
    "player_model, partner_model, metadata"
)
_OF_RUN = "episode_id IN (SELECT episode_id FROM episodes WHERE run_id = ?)"


def stored_episodes(store: Store, run_id: str) -> list[EpisodeRecord]:
    """A run's episodes as written, their rows in the order they were inserted (rowid)."""
    messages: dict[str, list[MessageRecord]] = {}
    for record in store.query_records(f"SELECT * FROM messages WHERE {_OF_RUN} ORDER BY episode_id, idx", [run_id]):
        messages.setdefault(record.pop("episode_id"), []).append(MessageRecord(**record))
    judgments: dict[str, list[JudgmentRecord]] = {}
    for record in store.query_records(f"SELECT * FROM judgments WHERE {_OF_RUN} ORDER BY rowid", [run_id]):
        judgments.setdefault(record.pop("episode_id"), []).append(JudgmentRecord(**record))
    scores: dict[str, list[ScoreRecord]] = {}
    for record in store.query_records("SELECT * FROM scores WHERE run_id = ? ORDER BY rowid", [run_id]):
        episode_id = record.pop("episode_id")
        record.pop("run_id")
        scores.setdefault(episode_id, []).append(ScoreRecord(**record))
    episodes = store.query_records(f"SELECT {_EPISODE_COLUMNS} FROM episodes WHERE run_id = ? ORDER BY rowid", [run_id])
    return [
        EpisodeRecord(
            **(episode | {"metadata": json.loads(episode["metadata"])}),
            messages=messages.get(episode["episode_id"], []),
            judgments=judgments.get(episode["episode_id"], []),
            scores=scores.get(episode["episode_id"], []),
        )
        for episode in episodes
    ]


def _instance_sets(store: Store) -> list[dict[str, Any]]:
    """The shard's stored instance sets (a run names the ones it plays, `FAMILY:SET`), as
    `write_instance_set` takes them; a set of the same name with other instances is refused there."""
    rows = store.query(
        "SELECT name, family, source, seed, created_at, instance_count, payload FROM instance_sets ORDER BY name"
    )
    keys = ("name", "family", "source", "seed", "created_at", "count")
    return [dict(zip(keys, row[:6], strict=True)) | {"payload": json.loads(row[6])} for row in rows]
