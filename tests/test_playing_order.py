"""The order work is played in: work that a finished piece opens (a staged family's next stage) goes
before work not yet started, so a family whose stages wait on each other is not left for the end."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

import pytest

from appliance.catalog.models import load_catalog
from appliance.catalog.panels import get_panel
from appliance.episodes.pool import ModelPool
from appliance.episodes.scheduler import Scheduler
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import load_family
from appliance.store import EpisodeRecord, Store
from tests.fakes import REPO, scripted_factory, seed_echo


def test_opened_work_goes_before_work_not_yet_started_and_results_keep_their_order() -> None:
    started: list[str] = []
    live: list[int] = [0, 0]  # now, most

    async def work(item: str, scheduler: Scheduler) -> str:
        started.append(item)
        live[0] += 1
        live[1] = max(live)
        await asyncio.sleep(0.001)
        live[0] -= 1
        return item.upper()

    def opens(item: str, result: str) -> Iterable[str]:
        return [f"{item}1", f"{item}2"] if item in ("a", "a1") else ()

    results = ModelPool({}, parallel=2).play(["a", "b", "c", "d"], work, opens)
    # a and b start at once; a's next stage (a1, a2) goes before c and d, and a1's (a11, a12) before a2
    assert started == ["a", "b", "a1", "a2", "a11", "a12", "c", "d"]
    assert live[1] == 2
    assert results == ["A", "B", "C", "D", "A1", "A2", "A11", "A12"]


def test_work_that_raises_ends_the_play_and_starts_nothing_more() -> None:
    started: list[int] = []

    async def work(item: int, scheduler: Scheduler) -> int:
        started.append(item)
        await asyncio.sleep(0)
        if item == 1:
            raise ValueError("broken item")
        return item

    with pytest.raises(ValueError, match="broken item"):
        ModelPool({}, parallel=1).play([0, 1, 2, 3], work)
    assert started == [0, 1]


def test_a_staged_family_goes_on_to_its_next_stage_while_another_family_waits(tmp_path: Path) -> None:
    """One episode at a time: SimulBench's later stages are played before PingPong's episodes, which
    were planned beside its first stage (every family used to wait for all first stages to end)."""
    catalog = load_catalog(REPO / "models.toml")
    players = ["smollm2-135m", "gemma3-270m"]  # two, so that SimulBench compares
    config = RunConfig(
        scenarios=["simulbench", "pingpong"],
        players=players,
        interrogator=players[0],
        simulator=players[0],
        panel=get_panel(REPO / "judges" / "panels.toml", "smollm2"),
        seed=5,
        limit=1,
        turns=2,
        parallel=1,
        models_file=str(catalog.source),
    )
    stored: list[EpisodeRecord] = []
    with Store.open(tmp_path / "db.duckdb") as store:
        families = [load_family(name, seed=5, store=store) for name in config.scenarios]
        runner = Runner(catalog, store, scripted_factory(seed_echo))
        summary = runner.execute(config, families, on_episode=stored.append)
    order = [(record.scenario, record.instance_id.split("/")[0]) for record in stored]
    assert summary.episodes_failed == 0 and summary.episodes_total == len(stored)
    stages = [stage for scenario, stage in order if scenario == "simulbench"]
    assert list(dict.fromkeys(stages)) == ["collect", "extract", "evaluate", "compare"]
    assert [scenario for scenario, _ in order] == ["simulbench"] * len(stages) + ["pingpong"] * 2
