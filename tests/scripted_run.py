"""A run of one family on the scripted mock model, in its own process, for tests that kill or race it.

    python tests/scripted_run.py DB FAMILY [--seed N] [--resume RUN_ID] [--kill-in-write K] [--delay S]
                                           [--wait-for FILE] [--checkpoint-every-commit] [--shard I/N]
                                           [--ray WORKERS]
                                           [--limit N] [--run-id NAME]

--kill-in-write K sends SIGKILL to this process inside the K-th episode's store transaction
(after the episode row, before its messages), the worst moment a kill can come. --delay S makes
every model request take S seconds, so that concurrent runs overlap. --wait-for FILE holds every model
request once the first episode is stored until FILE exists, so a test sees the run running with
stored episodes however slowly its own processes start (no race against the clock). Replies name the request's
seed, so a resumed run that sampled other seeds would store other text. --checkpoint-every-commit
makes DuckDB checkpoint after each commit (a 1 KB WAL limit), so that a random kill often lands in
a checkpoint, where a kill once left a file that would not open. --shard plays one shard of the
plan; --ray plays (or resumes) the run on that many workers of a local Ray cluster. --limit N
plays N instances of the family instead of its quick limit; --run-id names the run.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appliance.catalog.models import load_catalog
from appliance.catalog.panels import get_panel
from appliance.cluster.ray_cluster import ClusterOptions
from appliance.engine.types import GenerationRequest
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import family_entry, load_family
from appliance.store import Store
from tests.fakes import REPO, scripted_factory, seed_echo

PLAYERS = ["smollm2-135m", "gemma3-270m"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("family")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--resume")
    parser.add_argument("--kill-in-write", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--wait-for", type=Path)
    parser.add_argument("--checkpoint-every-commit", action="store_true")
    parser.add_argument("--shard")
    parser.add_argument("--ray", type=int, default=0)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--run-id")
    args = parser.parse_args()
    stored = 0

    def reply(model: str, request: GenerationRequest) -> str:
        if args.delay:
            time.sleep(args.delay)
        while args.wait_for is not None and stored and not args.wait_for.exists():
            time.sleep(0.05)
        return seed_echo(model, request)

    original_insert = Store._insert_messages

    def counting_insert(self: Store, episode: Any) -> None:
        nonlocal stored
        original_insert(self, episode)
        stored += 1

    Store._insert_messages = counting_insert  # type: ignore[method-assign]

    if args.kill_in_write:
        writes = 0
        original = Store._insert_messages

        def killing_insert(self: Store, episode: Any) -> None:
            nonlocal writes
            writes += 1
            if writes == args.kill_in_write:
                os.kill(os.getpid(), signal.SIGKILL)
            original(self, episode)

        Store._insert_messages = killing_insert  # type: ignore[method-assign]

    if args.checkpoint_every_commit:
        import appliance.store.store as store_module

        connect = store_module.connect_waiting

        def connect_checkpointing(path: Path, read_only: bool, wait_s: float) -> Any:
            connection = connect(path, read_only, wait_s)
            if not read_only:
                connection.execute("PRAGMA wal_autocheckpoint = '1KB'")
            return connection

        store_module.connect_waiting = connect_checkpointing

    catalog = load_catalog(REPO / "models.toml")
    config = RunConfig(
        scenarios=[args.family],
        players=PLAYERS,
        interrogator=PLAYERS[0],
        simulator=PLAYERS[0],
        panel=get_panel(REPO / "judges" / "panels.toml", "default"),
        seed=args.seed,
        limit=args.limit or family_entry(args.family).quick_limit,
        models_file=str(catalog.source),
        shard=args.shard,
    )
    print("ready", flush=True)  # imports done: a timed kill from now on lands in the run itself
    with Store.open(args.db) as store:
        cluster = ClusterOptions("local", workers=args.ray) if args.ray else None
        runner = Runner(catalog, store, scripted_factory(reply), cluster=cluster)
        if args.resume:
            summary = runner.resume(args.resume)
        else:
            family = load_family(args.family, seed=args.seed, store=store)
            summary = runner.execute(config, [family], run_id=args.run_id)
    line = summary.store_check.line()
    if line is not None:  # the store lacked what the run journaled (restored, or not: then exit 3)
        print(line, file=sys.stderr, flush=True)
    print(summary.run_id, summary.episodes_finished, summary.episodes_total, flush=True)
    if summary.store_check.unrepaired is not None:
        sys.exit(3)


if __name__ == "__main__":
    main()
