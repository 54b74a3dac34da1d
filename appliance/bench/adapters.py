"""Workload: a sweep of LoRA checkpoints in one run against one run per model, the way a lab runs it.

`appliance bench adapters SWEEP` plays the same instances twice through the real CLI, each arm in
fresh processes so that every peak RSS is that process's own: once with the base and every
checkpoint as players of one run (the base's weights loaded once, a llama.cpp context per adapter),
once as one run per model. It reports wall time and peak RSS per process and checks that both arms
scored every player alike (exact mode: results do not depend on what else shares the batch).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel

from appliance.bench.machine import describe_machine
from appliance.bench.outputs import write_bench_files
from appliance.catalog.models import Catalog
from appliance.errors import ApplianceError
from appliance.run.runner import package_versions


class ArmProcess(BaseModel):
    players: list[str]
    wall_s: float
    peak_rss_mb: float
    episodes: int


class AdapterBench(BaseModel):
    bench_id: str
    sweep: str
    base: str
    scenario: str
    limit: int
    machine: dict[str, object]
    versions: dict[str, str]
    one_run: ArmProcess
    run_per_model: list[ArmProcess]
    #: per player, the headline figures each arm stored: (one run, run of its own)
    figures: dict[str, tuple[dict[str, float | None], dict[str, float | None]]]

    @property
    def same_figures(self) -> bool:
        return all(together == alone for together, alone in self.figures.values())


def run_adapter_bench(catalog: Catalog, sweep: str, scenario: str, limit: int) -> AdapterBench:
    if sweep not in catalog.sweeps:
        known = ", ".join(sorted(catalog.sweeps)) or "none"
        raise ApplianceError(f"SWEEP: '{sweep}' is not a sweep (an entry with `adapters = ...`; known: {known})")
    checkpoints = catalog.sweeps[sweep]
    base = str(catalog.get(checkpoints[0]).base)
    players = [base, *checkpoints]
    with tempfile.TemporaryDirectory(prefix="adapter-bench-") as folder:
        together, together_figures = _play(catalog, players, scenario, limit, Path(folder) / "one.duckdb")
        alone: list[ArmProcess] = []
        alone_figures: dict[str, dict[str, float | None]] = {}
        for player in players:
            process, figures = _play(catalog, [player], scenario, limit, Path(folder) / f"{len(alone)}.duckdb")
            alone.append(process)
            alone_figures.update(figures)
    return AdapterBench(
        bench_id=datetime.now().strftime("%Y%m%d-%H%M%S"),
        sweep=sweep,
        base=base,
        scenario=scenario,
        limit=limit,
        machine=describe_machine(),
        versions=package_versions(),
        one_run=together,
        run_per_model=alone,
        figures={player: (together_figures[player], alone_figures[player]) for player in players},
    )


def _play(
    catalog: Catalog, players: list[str], scenario: str, limit: int, db: Path
) -> tuple[ArmProcess, dict[str, dict[str, float | None]]]:
    """One `appliance run` in a process of its own: its wall time, its peak RSS, what it stored."""
    command = [sys.executable, "-m", "appliance", "run", "--models", str(catalog.source), "--db", str(db)]
    command += ["--players", ",".join(players), "--scenario", scenario, "--limit", str(limit)]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    _, stderr = process.communicate()
    if os.waitstatus_to_exitcode(status) != 0:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise ApplianceError(f"adapter bench: `appliance run --players {','.join(players)}` failed: {last}")
    report = subprocess.run(
        [sys.executable, "-m", "appliance", "report", "--db", str(db), "--json"], capture_output=True, text=True
    )
    figures: dict[str, dict[str, float | None]] = {}
    episodes = 0
    for family in json.loads(report.stdout):
        for row in family.get("rows", []):
            figures[row["player"]] = {key: row.get(key) for key in ("played", "quality", "clemscore", "final")}
            episodes += int(row.get("episodes", 0))
    peak = usage.ru_maxrss / 1024  # kilobytes on Linux
    return ArmProcess(players=players, wall_s=wall, peak_rss_mb=peak, episodes=episodes), figures


def render_adapter_bench(bench: AdapterBench) -> str:
    alone_wall = sum(process.wall_s for process in bench.run_per_model)
    lines = [
        f"# appliance bench adapters {bench.sweep} ({bench.bench_id})",
        "",
        f"Machine: {bench.machine.get('cpu')}, {bench.machine.get('cores')} cores, "
        f"{bench.machine.get('memory_gb')} GB; llama-cpp-python {bench.versions.get('llama-cpp-python')}.",
        f"Workload: `--scenario {bench.scenario} --limit {bench.limit}` for the base '{bench.base}' and "
        f"{len(bench.run_per_model) - 1} checkpoints; every arm a fresh `appliance run` process.",
        "",
        "| arm | processes | players | episodes | wall s | peak RSS MB (largest process) |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
        f"| one run, base loaded once | 1 | {len(bench.one_run.players)} | {bench.one_run.episodes} | "
        f"{bench.one_run.wall_s:.1f} | {bench.one_run.peak_rss_mb:.0f} |",
        f"| one run per model | {len(bench.run_per_model)} | 1 each | "
        f"{sum(p.episodes for p in bench.run_per_model)} | {alone_wall:.1f} | "
        f"{max(p.peak_rss_mb for p in bench.run_per_model):.0f} |",
        "",
        f"Time ratio (one run / runs per model): {bench.one_run.wall_s / alone_wall:.2f}.",
        "",
        "| player | run alone: wall s | peak RSS MB | figures, one run | figures, alone |",
        "| --- | ---: | ---: | --- | --- |",
    ]
    for process in bench.run_per_model:
        player = process.players[0]
        together, alone = bench.figures[player]
        lines.append(
            f"| {player} | {process.wall_s:.1f} | {process.peak_rss_mb:.0f} | {_shown(together)} | {_shown(alone)} |"
        )
    lines += [
        "",
        "Same figures in both arms: " + ("yes" if bench.same_figures else "NO (see the rows above)") + ".",
        "",
    ]
    return "\n".join(lines)


def _shown(figures: dict[str, float | None]) -> str:
    return ", ".join(f"{key} {value:.1f}" for key, value in figures.items() if value is not None)


def write_adapter_bench(bench: AdapterBench, folder: Path) -> tuple[Path, Path]:
    return write_bench_files(folder, f"bench-{bench.bench_id}-adapters", bench, render_adapter_bench(bench))
