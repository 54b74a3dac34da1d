"""The coordinator's cost: what the driver of a run spends per episode, and how fast the store takes them.

    python -m tests.coordinator_figures --work DIR [--limit N] [--out bench_results/FILE.md]

On the scripted mock model (replies cost nothing), the clembench run of `--limit` per game row is
played in one process and on a local Ray cluster of 2 workers x 1 CPU; the driver's CPU time per
episode is its overhead (planning, handing out, receiving, writing). Then the run's episodes are
written again into a fresh store one transaction each, as a run writes them: the store's write
rate. Run it alone; docs/scale-out.md turns the figures into the worker count at which the driver
becomes the bottleneck.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appliance.catalog.models import load_catalog
from appliance.catalog.panels import get_panel
from appliance.cluster.ray_cluster import ClusterOptions
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import load_family
from appliance.store import Store
from appliance.store.merge import stored_episodes
from tests.fakes import REPO, scripted_factory, seed_echo

PLAYERS = ["smollm2-135m", "gemma3-270m"]


def driver_cost(work: Path, limit: int) -> dict[str, dict[str, Any]]:
    catalog = load_catalog(REPO / "models.toml")
    config = RunConfig(
        scenarios=["clembench"],
        players=PLAYERS,
        interrogator=PLAYERS[0],
        panel=get_panel(REPO / "judges" / "panels.toml", "default"),
        seed=5,
        limit=limit,
        models_file=str(catalog.source),
    )
    figures: dict[str, dict[str, Any]] = {}
    for arm, cluster in (("one process", None), ("Ray, 2 workers x 1 CPU", ClusterOptions("local", 2, 1))):
        db = work / f"{len(figures)}.duckdb"
        with Store.open(db) as store:
            family = load_family("clembench", seed=5, store=store)
            runner = Runner(catalog, store, scripted_factory(seed_echo), cluster=cluster)
            cpu, clock = time.process_time(), time.perf_counter()
            summary = runner.execute(config, [family])
            wall, cpu = time.perf_counter() - clock, time.process_time() - cpu
        episodes = summary.episodes_finished + summary.episodes_failed
        figures[arm] = {
            "db": db,
            "episodes": episodes,
            "wall_s": round(wall, 2),
            "driver_cpu_ms_per_episode": round(1000 * cpu / episodes, 1),
            "wall_ms_per_episode": round(1000 * wall / episodes, 1),
            "episodes_per_worker": summary.workers,
        }
    return figures


def store_write_rate(source: Path, work: Path) -> dict[str, Any]:
    with Store.open(source, read_only=True) as store:
        run_id = store.resolve_run_id(None)
        records = stored_episodes(store, run_id)
    with Store.open(work / "writes.duckdb") as store:
        clock = time.perf_counter()
        for record in records:
            store.write_episode(record)
        wall = time.perf_counter() - clock
    return {
        "episodes": len(records),
        "messages": sum(len(r.messages) for r in records),
        "wall_s": round(wall, 2),
        "episodes_per_s": round(len(records) / wall, 1),
        "ms_per_episode": round(1000 * wall / len(records), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True, help="an empty folder for the stores")
    parser.add_argument("--limit", type=int, default=10, help="clembench episodes per game row")
    parser.add_argument("--out", type=Path, help="a markdown file for the figures")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    figures = driver_cost(args.work, args.limit)
    writes = store_write_rate(figures["one process"].pop("db"), args.work)
    figures["Ray, 2 workers x 1 CPU"].pop("db")
    print(json.dumps({"driver": figures, "store writes": writes}, indent=1))
    if args.out is not None:
        lines = [
            "# Coordinator cost (tests/coordinator_figures.py)",
            "",
            f"Scripted clembench, --limit {args.limit} per game row, seed 5; run alone.",
            "",
            "| arm | episodes | wall s | driver CPU ms / episode | wall ms / episode | episodes per worker |",
            "| --- | ---: | ---: | ---: | ---: | --- |",
        ]
        for arm, row in figures.items():
            lines.append(
                f"| {arm} | {row['episodes']} | {row['wall_s']} | {row['driver_cpu_ms_per_episode']} | "
                f"{row['wall_ms_per_episode']} | {row['episodes_per_worker'] or '-'} |"
            )
        lines += [
            "",
            f"Store writes, one transaction per episode: {writes['episodes']} episodes ({writes['messages']} "
            f"messages) in {writes['wall_s']} s: {writes['episodes_per_s']} episodes/s, "
            f"{writes['ms_per_episode']} ms each.",
            "",
        ]
        args.out.write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
