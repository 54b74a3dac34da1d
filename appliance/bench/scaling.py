"""Workload: the end-to-end PingPong workload at growing sizes, the appliance alone.

`appliance bench scaling 16,64,256` plays the bench's end-to-end workload (greedy PingPong, the
same player, interrogator, panel and seed) at each conversation count, every point in a fresh
process (`python -m appliance.bench.scaling`) so that its peak RSS is its own. A point reports wall
time, tokens computed per second, prefilled / distinct prompt tokens and peak RSS; the seconds per
conversation against the smallest point's say whether cost grows linearly with the work. Past the
models' slots, conversations wait for a slot and their caches are evicted and recomputed: that is
where a super-linear step would come from, and the prefill ratio shows it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel

from appliance.bench.decode import RawConfig
from appliance.bench.e2e import appliance_arm, workload_config
from appliance.bench.ideal import IdealTime, ideal_markdown, ideal_time
from appliance.bench.machine import describe_machine
from appliance.bench.outputs import write_bench_files
from appliance.catalog.backends import LlamaCppOptions
from appliance.catalog.models import Catalog, load_catalog
from appliance.catalog.panels import Panel, get_panel
from appliance.errors import ApplianceError, first_line
from appliance.paths import judges_dir
from appliance.run.runner import package_versions
from appliance.scenarios import ScenarioFamily, load_family


class ScalingPoint(BaseModel):
    conversations: int
    turns: int
    episodes: int
    wall_s: float
    prefill_tokens: int
    cached_prompt_tokens: int
    decode_tokens: int
    peak_kv_cells: int
    #: prefill-computed tokens lost when caches were overwritten: dropped from host memory, or never saved
    evicted_tokens: int = 0
    #: the point's process, from start to the end of the workload (imports and model loads included)
    peak_rss_mb: float
    #: the workload's counts and ideal time, measured after it in the same process (not in the peak RSS)
    ideal: IdealTime

    @property
    def distinct_prompt_tokens(self) -> int:
        """The prefix tree of every prompt the llama.cpp models were asked: computed once at best."""
        return sum(self.ideal.workload.distinct_prompt_tokens.values())

    @property
    def prefill_ratio(self) -> float:
        return self.prefill_tokens / self.distinct_prompt_tokens if self.distinct_prompt_tokens else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Tokens the models computed (prefilled and generated) per second of wall time."""
        return (self.prefill_tokens + self.decode_tokens) / self.wall_s if self.wall_s else 0.0

    @property
    def seconds_per_conversation(self) -> float:
        return self.wall_s / self.conversations


class ScalingBench(BaseModel):
    bench_id: str
    machine: dict[str, object]
    versions: dict[str, str]
    player: str
    panel: list[str]
    turns: int
    seed: int
    #: per model: (slots, context length, KV budget in MB or None) as the catalog gives them
    engines: dict[str, tuple[int, int, int | None]]
    points: list[ScalingPoint]
    wall_s: float


def run_scaling_bench(
    catalog: Catalog,
    panel: Panel,
    sizes: list[int],
    *,
    player: str,
    turns: int,
    seed: int,
    say: Callable[[str], None],
) -> ScalingBench:
    catalog.get(player)  # an unknown player is one line before any point starts
    started = time.perf_counter()
    points: list[ScalingPoint] = []
    for conversations in sizes:
        say(f"scaling: PingPong, {conversations} conversations x {turns} turns, panel {panel.judges}")
        point = _point_in_subprocess(catalog, panel, conversations, player=player, turns=turns, seed=seed)
        say(
            f"  {point.wall_s:.1f} s ({point.seconds_per_conversation:.1f} s per conversation), "
            f"{point.tokens_per_s:.0f} tok/s, prefilled/distinct {point.prefill_ratio:.2f}, "
            f"peak RSS {point.peak_rss_mb:.0f} MB, {point.ideal.appliance_multiple:.2f}x the ideal"
        )
        points.append(point)
    specs = [catalog.get(name) for name in dict.fromkeys([player, *panel.judges])]
    engines = {s.name: (s.slots, s.context_length, getattr(s.options, "kv_budget_mb", None)) for s in specs}
    return ScalingBench(
        bench_id=datetime.now().strftime("%Y%m%d-%H%M%S"),
        machine=describe_machine(),
        versions=package_versions(),
        player=player,
        panel=list(panel.judges),
        turns=turns,
        seed=seed,
        engines=engines,
        points=points,
        wall_s=time.perf_counter() - started,
    )


def _point_in_subprocess(
    catalog: Catalog, panel: Panel, conversations: int, *, player: str, turns: int, seed: int
) -> ScalingPoint:
    command = [sys.executable, "-m", "appliance.bench.scaling", str(catalog.source), "--panel", panel.name]
    command += ["--player", player, "--conversations", str(conversations), "--turns", str(turns), "--seed", str(seed)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ApplianceError(f"scaling bench: the point at {conversations} conversations failed: {last}")
    return ScalingPoint(**json.loads(result.stdout.strip().splitlines()[-1]))


def measure_point(
    catalog: Catalog, panel: Panel, conversations: int, *, player: str, turns: int, seed: int
) -> ScalingPoint:
    """One point, in this process: the appliance plays the workload into a temporary store."""
    pingpong = load_family("pingpong")
    assert isinstance(pingpong, ScenarioFamily)  # PingPong plays in one go
    config = workload_config(
        catalog,
        pingpong,
        conversations=conversations,
        turns=turns,
        player=player,
        interrogator=player,
        panel=panel,
        seed=seed,
        parallel=conversations,
    )
    arm, _, workload = appliance_arm(catalog, pingpong, config)
    options = catalog.get(player).options_as(LlamaCppOptions)
    raw = RawConfig(flash_attention=options.flash_attention, kv_unified=options.kv_unified)
    return ScalingPoint(
        conversations=conversations,
        turns=turns,
        episodes=arm.episodes,
        wall_s=arm.wall_s,
        prefill_tokens=arm.prefill_tokens,
        cached_prompt_tokens=arm.cached_prompt_tokens,
        decode_tokens=arm.decode_tokens,
        peak_kv_cells=arm.peak_kv_cells,
        evicted_tokens=arm.evicted_tokens,
        peak_rss_mb=arm.peak_rss_mb,
        ideal=ideal_time(catalog, workload, arm.wall_s, raw, sequences=conversations, seed=seed),
    )


def render_scaling_bench(bench: ScalingBench) -> str:
    first = bench.points[0]
    engines = "; ".join(
        f"{name} {slots} slots x {context} tokens" + (f", KV budget {budget} MB" if budget else "")
        for name, (slots, context, budget) in bench.engines.items()
    )
    lines = [
        f"# appliance bench scaling ({bench.bench_id})",
        "",
        f"Machine: {bench.machine.get('cpu')}, {bench.machine.get('cores')} cores, "
        f"{bench.machine.get('memory_gb')} GB; llama-cpp-python {bench.versions.get('llama-cpp-python')}. "
        f"Total {bench.wall_s:.0f} s.",
        f"Workload: PingPong, greedy, {bench.turns} turns, player and interrogator {bench.player}, judges "
        f"{bench.panel}, seed {bench.seed}; every point a fresh process. Engines: {engines}.",
        "",
        "| conversations | episodes | wall s | s per conversation | x smallest point's | tokens/s | prefilled "
        "| distinct | prefilled / distinct | generated | peak KV cells | evicted tokens | peak RSS MB | x ideal |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *[
            f"| {p.conversations} | {p.episodes} | {p.wall_s:.1f} | {p.seconds_per_conversation:.2f} | "
            f"{p.seconds_per_conversation / first.seconds_per_conversation:.2f} | {p.tokens_per_s:.0f} | "
            f"{p.prefill_tokens} | {p.distinct_prompt_tokens} | {p.prefill_ratio:.2f} | {p.decode_tokens} | "
            f"{p.peak_kv_cells} | {p.evicted_tokens} | {p.peak_rss_mb:.0f} | {p.ideal.appliance_multiple:.2f} |"
            for p in bench.points
        ],
        "",
        "Linear cost keeps the seconds per conversation flat; above 1 in the fifth column, each conversation "
        "costs more as the work grows.",
        "",
    ]
    for p in bench.points:
        lines += [f"### The ideal time at {p.conversations} conversations", "", *ideal_markdown(p.ideal), ""]
    return "\n".join(lines)


def write_scaling_bench(bench: ScalingBench, folder: Path) -> tuple[Path, Path]:
    return write_bench_files(folder, f"bench-{bench.bench_id}-scaling", bench, render_scaling_bench(bench))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", type=Path)
    parser.add_argument("--panel", required=True)
    parser.add_argument("--player", required=True)
    parser.add_argument("--conversations", type=int, required=True)
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        catalog = load_catalog(args.models)
        panel = get_panel(judges_dir() / "panels.toml", args.panel)
        point = measure_point(catalog, panel, args.conversations, player=args.player, turns=args.turns, seed=args.seed)
    except ApplianceError as error:
        print(f"error: {first_line(error)}", file=sys.stderr)
        sys.exit(2)
    print(point.model_dump_json())


if __name__ == "__main__":
    main()
