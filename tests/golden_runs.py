"""Stored runs in a canonical form, to show that a change of structure changed no figure.

    python -m tests.golden_runs --work DIR   rewrites tests/data/golden_runs.json from this code

The scripted run of every family (the mock model echoes each request's seed, so any change in
seeding, planning or judging shows) and a tiny run on the real SmolLM2 are dumped without run ids
and timings: episodes, messages, verdicts and scores, in a stable order.

The SmolLM2 run is kept per platform (`platform()`: llama.cpp's CPU features as built here): the
same code samples other tokens where the matrix kernels differ (AVX-512 against AVX2 alone). A
rewrite replaces this platform's entry and keeps the others; after a deliberate change of figures
they are stale, so `--only-this-platform` drops them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appliance.catalog.models import Catalog, load_catalog
from appliance.catalog.panels import get_panel
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import family_entry, family_names, load_family
from appliance.store import Store
from tests.fakes import REPO, scripted_factory, seed_echo

GOLDEN = REPO / "tests" / "data" / "golden_runs.json"
PLAYERS = ["smollm2-135m", "gemma3-270m"]


def canonical(store: Store, run_id: str) -> dict[str, Any]:
    """Everything a run stored that its figures come from, without ids and clocks."""

    def rows(sql: str) -> list[list[Any]]:
        found = store.query(sql, [run_id])
        return [[_rounded(value) for value in row] for row in found]

    strip = f"replace(e.episode_id, '{run_id}', 'RUN')"
    return {
        "episodes": rows(
            f"SELECT {strip}, e.scenario, e.instance_id, e.player, e.status, e.seed, e.error, e.metadata "
            "FROM episodes e WHERE e.run_id = ? ORDER BY 1"
        ),
        "messages": rows(
            f"SELECT {strip}, m.idx, m.speaker, m.model, m.text, m.finish_reason, m.prompt_tokens, "
            "m.completion_tokens FROM messages m JOIN episodes e USING (episode_id) WHERE e.run_id = ? ORDER BY 1, 2"
        ),
        "judgments": rows(
            f"SELECT {strip}, j.panel, j.judge, j.mode, j.template, j.target_idx, j.criterion, j.score, j.raw_text, "
            "j.parsed, j.order_swapped FROM judgments j JOIN episodes e USING (episode_id) WHERE e.run_id = ? "
            "ORDER BY 1, 2, 3, 4, 5, 6, 7, 10"
        ),
        "scores": rows(
            f"SELECT {strip}, s.panel, s.player, s.metric, s.value, s.calibrated_value "
            "FROM scores s JOIN episodes e USING (episode_id) WHERE e.run_id = ? ORDER BY 1, 2, 3, 4"
        ),
    }


def _rounded(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


def scripted_run(
    db: Path, family: str, shard: str | None = None, runner: Callable[[Catalog, Store], Runner] | None = None
) -> dict[str, Any]:
    """The quick suite's share of `family` on the scripted mock model, seed 5 (as tests/scripted_run.py);
    with `shard` ("I/N") only that shard of it; `runner` makes the runner (default: one process)."""
    catalog = load_catalog(REPO / "models.toml")
    config = RunConfig(
        scenarios=[family],
        players=PLAYERS,
        interrogator=PLAYERS[0],
        simulator=PLAYERS[0],
        panel=get_panel(REPO / "judges" / "panels.toml", "default"),
        seed=5,
        limit=family_entry(family).quick_limit,
        models_file=str(catalog.source),
        shard=shard,
    )
    with Store.open(db) as store:
        loaded = load_family(family, seed=5, store=store)
        made = runner(catalog, store) if runner is not None else Runner(catalog, store, scripted_factory(seed_echo))
        summary = made.execute(config, [loaded])
        return canonical(store, summary.run_id)


def smollm2_run(db: Path) -> dict[str, Any]:
    """One PingPong episode of two turns on the real SmolLM2 in every role, judged by its sampled panel."""
    catalog = load_catalog(REPO / "models.toml")
    config = RunConfig(
        scenarios=["pingpong"],
        players=["smollm2-135m"],
        interrogator="smollm2-135m",
        panel=get_panel(REPO / "judges" / "panels.toml", "smollm2"),
        seed=3,
        limit=1,
        turns=2,
        models_file=str(catalog.source),
    )
    with Store.open(db) as store:
        summary = Runner(catalog, store).execute(config, [load_family("pingpong", seed=3, store=store)])
        return canonical(store, summary.run_id)


#: where the SmolLM2 runs are, by platform
SMOLLM2 = "smollm2:pingpong"


def platform() -> str:
    """llama.cpp's CPU features as this build uses them: the same code samples the same tokens only on one."""
    import llama_cpp

    return " ".join(llama_cpp.llama_print_system_info().decode().split())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=GOLDEN)
    parser.add_argument("--work", type=Path, required=True, help="a folder for the stores")
    parser.add_argument("--only-this-platform", action="store_true", help="drop other platforms' SmolLM2 runs")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    before = json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {}
    golden: dict[str, Any] = {
        f"scripted:{name}": scripted_run(args.work / f"{name}.duckdb", name) for name in family_names()
    }
    others = {} if args.only_this_platform else before.get(SMOLLM2, {})
    golden[SMOLLM2] = {**others, platform(): smollm2_run(args.work / "smollm2.duckdb")}
    args.out.write_text(json.dumps(golden, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    counts = ", ".join(f"{name} {len(run['episodes'])}" for name, run in golden.items() if name != SMOLLM2)
    print(f"{args.out}: {counts}; SmolLM2 runs of {len(golden[SMOLLM2])} platform(s)")


if __name__ == "__main__":
    main()
