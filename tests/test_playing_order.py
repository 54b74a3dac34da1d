"""The order work is played in: work that a finished piece opens (a staged family's next stage) goes
before work not yet started, so a family whose stages wait on each other is not left for the end."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

import pytest

from appliance.catalog.models import load_catalog
from appliance.catalog.panels import get_panel
from appliance.catalog.sampling import Sampling
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.types import Completion, GenerationRequest, Message
from appliance.episodes.context import EpisodeContext
from appliance.episodes.pool import ModelPool
from appliance.episodes.roles import bind_role
from appliance.episodes.scheduler import Scheduler
from appliance.run.planning import RunRequest, plan_run, quick_suite_note
from appliance.run.runner import Runner, RunSummary
from appliance.run_config import RunConfig
from appliance.scenarios import load_family
from appliance.scenarios.registry import QUICK_REPLY_TOKENS
from appliance.scenarios.registry import families as registered_families
from appliance.store import EpisodeRecord, Store
from tests.fakes import REPO, Reply, scripted_factory, seed_echo


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


def _one_at_a_time(scenarios: list[str], **extra: object) -> RunConfig:
    """A scripted run of two players (two, so that SimulBench compares), one episode at a time."""
    players = ["smollm2-135m", "gemma3-270m"]
    return RunConfig(
        scenarios=scenarios,
        players=players,
        interrogator=players[0],
        simulator=players[0],
        panel=get_panel(REPO / "judges" / "panels.toml", "smollm2"),
        seed=5,
        limit=1,
        turns=2,
        parallel=1,
        models_file=str(REPO / "models.toml"),
        **extra,
    )


def _play(tmp_path: Path, config: RunConfig, reply: Reply = seed_echo) -> tuple[RunSummary, list[EpisodeRecord]]:
    """The run's summary and its episodes in the order they were stored."""
    stored: list[EpisodeRecord] = []
    with Store.open(tmp_path / "db.duckdb") as store:
        families = [load_family(name, seed=5, store=store) for name in config.scenarios]
        runner = Runner(load_catalog(REPO / "models.toml"), store, scripted_factory(reply))
        summary = runner.execute(config, families, on_episode=stored.append)
    return summary, stored


def test_a_staged_family_goes_on_to_its_next_stage_while_another_family_waits(tmp_path: Path) -> None:
    """One episode at a time: SimulBench's later stages are played before PingPong's episodes, which
    were planned beside its first stage (every family used to wait for all first stages to end)."""
    summary, stored = _play(tmp_path, _one_at_a_time(["simulbench", "pingpong"]))
    order = [(record.scenario, record.instance_id.split("/")[0]) for record in stored]
    assert summary.episodes_failed == 0 and summary.episodes_total == len(stored)
    stages = [stage for scenario, stage in order if scenario == "simulbench"]
    assert list(dict.fromkeys(stages)) == ["collect", "extract", "evaluate", "compare"]
    assert [scenario for scenario, _ in order] == ["simulbench"] * len(stages) + ["pingpong"] * 2


def test_the_longest_chain_starts_first_whatever_the_order_given(tmp_path: Path) -> None:
    """PingPong is named first, yet SimulBench's first stage is played first: its three later stages wait
    on it, and a staged family started last ends the run alone (make run's SimulBench was its tail)."""
    _, stored = _play(tmp_path, _one_at_a_time(["pingpong", "simulbench"]))
    assert stored[0].scenario == "simulbench" and stored[0].instance_id.startswith("collect/")
    assert {record.scenario for record in stored} == {"simulbench", "pingpong"}


def test_a_reply_cap_bounds_every_reply_of_its_family_and_no_verdict(tmp_path: Path) -> None:
    """The quick suite's reply cap: SimulBench's simulator, user agent and players ask for up to 1024 tokens
    and are served at most the cap; its judges' verdicts (the `smollm2` panel samples them) keep their
    templates' budgets, and PingPong, which has no cap here, asks for what it asks."""
    asked: dict[tuple[str, str], list[int]] = {}

    def recording(model: str, request: GenerationRequest) -> str:
        key = str(request.conversation_key)  # run:scenario:instance:player/seat/model
        family, seat = key.split(":")[1], key.split("/")[-2]
        kind = "verdict" if seat.startswith("judge") else "reply"
        asked.setdefault((family, kind), []).append(request.sampling.max_tokens)
        return seed_echo(model, request)

    summary, _ = _play(tmp_path, _one_at_a_time(["simulbench", "pingpong"], reply_caps={"simulbench": 48}), recording)
    assert summary.episodes_failed == 0
    assert max(asked["simulbench", "reply"]) == 48
    assert max(asked["simulbench", "verdict"]) > 48
    assert max(asked["pingpong", "reply"]) > 48


def test_the_quick_suite_caps_every_familys_replies_and_says_so() -> None:
    catalog = load_catalog(REPO / "models.toml")
    config = plan_run(RunRequest(), catalog, registered_families())
    names = [entry.name for entry in registered_families()]
    assert config.quick and config.reply_caps == dict.fromkeys(names, QUICK_REPLY_TOKENS)
    assert f"replies capped at {QUICK_REPLY_TOKENS} tokens: {', '.join(names)}." in quick_suite_note(
        config, registered_families()
    )
    named = plan_run(RunRequest(scenarios=["simulbench"]), catalog, registered_families())
    assert named.reply_caps == {}


def test_a_reply_cap_stops_the_real_model_at_the_cap_and_leaves_a_verdict_whole(smollm2: LlamaCppBackend) -> None:
    """SmolLM2, greedy, asked for 64 tokens of a story it would go on with: served 6, cut by length. The
    same request as a judge's is served 12 of 12: the cap is on replies, not on the instrument's verdicts."""
    catalog = load_catalog(REPO / "models.toml")
    ctx = EpisodeContext(
        episode_id="cap",
        seed=0,
        scheduler=Scheduler({"smollm2-135m": smollm2}),
        roles={role: bind_role(catalog, "smollm2-135m", role) for role in ("player", "judge")},
        max_reply_tokens=6,
    )
    ask = [Message(role="user", content="Tell me a long story about a lighthouse keeper.")]

    async def reply(role: str, max_tokens: int) -> Completion:
        sampling = Sampling(temperature=0.0, max_tokens=max_tokens)
        task = asyncio.ensure_future(ctx.generate(role, ask, sampling=sampling))
        await ctx.scheduler.drive(task)
        return task.result()

    completion = asyncio.run(reply("player", 64))
    assert (completion.completion_tokens, completion.finish_reason) == (6, "length")
    assert ctx.messages[-1].completion_tokens == 6
    verdict = asyncio.run(reply("judge", 12))
    assert (verdict.completion_tokens, verdict.finish_reason) == (12, "length")
