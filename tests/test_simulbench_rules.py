"""SimulBench with scripted models: strategy parsing and its failure path, script extraction on
hand-made dialogues, the pairwise order-swap rules, and the staged pipeline through the runner."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from appliance.catalog.models import load_catalog
from appliance.catalog.panels import Panel
from appliance.engine.backend import overflow_message
from appliance.engine.scripted import ScriptedBackend
from appliance.engine.types import GenerationRequest
from appliance.episodes.client import RoleBinding
from appliance.episodes.context import EpisodeContext
from appliance.episodes.scheduler import Scheduler
from appliance.errors import ApplianceError
from appliance.judging.templates import RatingTemplate
from appliance.judging.verdicts import PairVerdict, ask_judge
from appliance.run.rescoring import rescore_run
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import load_family
from appliance.scenarios.simulbench.family import read_simulbench_file
from appliance.scenarios.simulbench.headline import simulbench_headline
from appliance.scenarios.simulbench.report import build_simulbench_report, perfect_scripts_of_run
from appliance.scenarios.simulbench.scripts import DialogueTurn, ScriptSet, extract_scripts
from appliance.scenarios.simulbench.stages import collect_dialogue
from appliance.scenarios.simulbench.tasks import SimulBenchTask, load_task_folder
from appliance.scenarios.simulbench.user_agent import (
    STRATEGIES,
    SimulBenchSettings,
    StrategyError,
    parse_strategy_reply,
    strategy_grammar,
)
from appliance.scenarios.simulbench.verdicts import first_challenging_turn, pair_outcome, pair_scores
from appliance.store import EpisodeRecord, Store
from appliance.store.records import JudgmentRecord
from appliance.store.run_view import RunView
from appliance.util.stats import bootstrap_interval, cluster_bootstrap_interval
from tests.fakes import conversation_of, hand_episode, role_of, scripted_factory, store_hand_run

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "scenarios" / "simulbench"
PEERS = REPO.parent / "shared" / "datasets" / "peers" / "simulbench"
TASK = SimulBenchTask(
    id="calc", name="Calculator", type="stateless", description="Act as a calculator.", first_request="2+2"
)


def turns(count: int) -> list[DialogueTurn]:
    return [DialogueTurn(request=f"request {n}", reply=f"reply {n}", strategy="related") for n in range(1, count + 1)]


def test_our_tasks_are_thirty_or_more_of_both_types_with_unique_ids() -> None:
    tasks = load_task_folder(DATA)
    assert len(tasks) >= 30
    assert {t.type for t in tasks} == {"stateless", "stateful"}
    assert min(sum(t.type == kind for t in tasks) for kind in ("stateless", "stateful")) >= 15
    assert all(t.first_request and t.request_type and len(t.description) > 80 for t in tasks)


def test_strategy_reply_parses_and_rejects_what_it_must() -> None:
    reply = parse_strategy_reply('{"strategy": "harder", "request": "  ls -R /  "}')
    assert (reply.strategy, reply.request) == ("harder", "ls -R /")
    for bad, reason in [
        ('{"strategy": "harder", "request": "ls', "not JSON"),  # cut off by the token limit
        ('["harder", "ls"]', "not a JSON object"),
        ('{"strategy": "charm", "request": "ls"}', "unknown strategy"),
        ('{"strategy": "flaw", "request": "   "}', "'request'"),
        ('{"strategy": "flaw"}', "'request'"),
    ]:
        with pytest.raises(StrategyError, match=reason):
            parse_strategy_reply(bad)
    grammar = strategy_grammar()
    assert "char+" in grammar and all(f'"{name}"' in grammar for name in STRATEGIES)


def test_a_reply_cut_by_the_token_cap_keeps_the_request_written_so_far() -> None:
    """The paper caps a user agent utterance at 300 tokens: a cut utterance is still sent, as far as it got."""
    cut = parse_strategy_reply('{"strategy": "harder", "request": "find / -name \\"*.log', cut=True)
    assert (cut.strategy, cut.request) == ("harder", 'find / -name "*.log')
    half_escape = parse_strategy_reply('{"strategy": "flaw", "request": "line one\\nline two\\', cut=True)
    assert half_escape.request == "line one\nline two"
    for bad in ['{"strategy": "harder", "request": "ls', '{"strategy": "har']:
        with pytest.raises(StrategyError, match="not JSON"):
            parse_strategy_reply(bad, cut=bad.endswith("har"))  # not cut, or cut before the request
    with pytest.raises(StrategyError, match="'request'"):
        parse_strategy_reply('{"strategy": "flaw", "request": "  ', cut=True)


def test_the_user_agent_is_capped_at_the_papers_300_tokens() -> None:
    assert SimulBenchSettings.load(DATA / "prompts.toml").user_agent_max_tokens == 300


def run_collect(agent_replies: list[str], max_turns: int = 4) -> tuple[list[DialogueTurn], int, EpisodeContext]:
    settings = SimulBenchSettings.load(DATA / "prompts.toml")
    replies = iter(agent_replies)

    def respond(request: GenerationRequest) -> str:
        if "/user_agent/" in conversation_of(request):
            assert request.sampling.temperature == pytest.approx(1.2) and request.grammar is not None
            return next(replies)
        assert request.sampling.temperature == 0.0
        return f"sim saw {sum(m.role == 'user' for m in request.messages)} requests"

    scheduler = Scheduler({"m": ScriptedBackend("m", respond)})
    ctx = EpisodeContext("e", 0, scheduler, {"user_agent": RoleBinding("m"), "simulator": RoleBinding("m")})

    async def main() -> tuple[list[DialogueTurn], int]:
        task = asyncio.ensure_future(collect_dialogue(ctx, settings, TASK, max_turns))
        await scheduler.drive(task)
        return task.result()

    dialogue, failures = asyncio.run(main())
    return dialogue, failures, ctx


def test_collection_runs_four_turns_with_the_agents_strategies() -> None:
    agent = [json.dumps({"strategy": s, "request": f"req {s}"}) for s in ("flaw", "related", "harder")]
    dialogue, failures, ctx = run_collect(agent)
    assert failures == 0
    assert [t.strategy for t in dialogue] == ["opening", "flaw", "related", "harder"]
    assert dialogue[0].request == "Act as a calculator.\n\n2+2"
    assert [t.reply for t in dialogue] == [f"sim saw {n} requests" for n in (1, 2, 3, 4)]
    assert [m.speaker for m in ctx.messages].count("simulator") == 4


def test_a_rejected_agent_reply_is_retried_once_then_the_dialogue_ends() -> None:
    agent = ['{"strategy": "related", "request": "next"}', "not json", '{"strategy": "shout", "request": "x"}']
    dialogue, failures, ctx = run_collect(agent)
    assert len(dialogue) == 2 and failures == 2
    notes = [m.text for m in ctx.messages if m.speaker == "gm"]
    assert notes[0].startswith("user agent reply rejected (not JSON")
    assert "unknown strategy 'shout'" in notes[1]
    assert notes[-1] == "dialogue ended after turn 2: the user agent gave no valid request"
    recovered, failures, _ = run_collect(["oops", '{"strategy": "other", "request": "r"}'], max_turns=2)
    assert len(recovered) == 2 and failures == 1


def test_no_challenging_turn_gives_one_last_only_script() -> None:
    (script,) = extract_scripts(TASK, "calc/d0", turns(4), None)
    assert (script.kind, script.turn, script.id, script.hard) == ("LastOnly", 4, "calc/d0/t4", False)
    assert [t.role for t in script.history] == ["user", "assistant"] * 3 + ["user"]
    assert script.request == "request 4" and "reply 4" not in script.earlier_turns()


def test_a_challenging_turn_gives_first_and_subsequent_scripts() -> None:
    scripts = extract_scripts(TASK, "calc/d1", turns(4), 2)
    assert [(s.kind, s.turn) for s in scripts] == [("FirstChan", 2), ("SubseqChan", 3), ("SubseqChan", 4)]
    assert all(s.hard for s in scripts)
    assert [len(s.history) for s in scripts] == [3, 5, 7]
    assert scripts[0].messages()[-1].content == "request 2" and "reply 1" in scripts[0].earlier_turns()
    (only,) = extract_scripts(TASK, "calc/d2", turns(3), 3)
    assert (only.kind, only.turn) == ("FirstChan", 3)
    (first,) = extract_scripts(TASK, "calc/d3", turns(1), 1)
    assert first.earlier_turns().startswith("(none")
    with pytest.raises(ValueError):
        extract_scripts(TASK, "calc/d4", turns(2), 3)


def test_judges_see_the_most_recent_turns_their_context_holds() -> None:
    long_turns = [
        DialogueTurn(request=f"r{n} " + "x" * 50, reply=f"s{n} " + "y" * 50, strategy="related") for n in (1, 2, 3)
    ]
    script = extract_scripts(TASK, "calc/d5", [*long_turns, *turns(1)], None)[0]
    whole = script.earlier_turns()
    assert whole.startswith("User: r1") and len(whole) > 300
    trimmed = script.earlier_turns(2)
    assert trimmed.startswith("(4 earlier messages left out)") and "r3" in trimmed and "s3" in trimmed
    assert "r2" not in trimmed
    template = RatingTemplate(name="t", system="Grade.", user="{history}\n{request}", max_tokens=8)
    variants = [{"history": script.earlier_turns(k), "request": script.request} for k in range(6, -1, -1)]
    # the judge's context (one token per character) holds the prompt and the verdict with 2 earlier messages
    room = len(template.system) + len(variants[4]["history"]) + len(script.request) + 1 + template.max_tokens
    backend = ScriptedBackend("j", lambda request: '{"score": 6}', context_chars=room)
    records = _judge_in(backend, template, variants)
    assert records[0].parsed and records[0].score == 6.0
    shown = [request.messages[-1].content for request in backend.requests]
    assert len(shown) == 5 and shown[-1].startswith("(4 earlier messages left out)")  # 6, 5, 4, 3 did not fit
    tiny = ScriptedBackend("j", lambda request: '{"score": 6}', context_chars=10)
    (unfit,) = _judge_in(tiny, template, variants)
    assert not unfit.parsed and "does not fit the context" in unfit.raw_text  # stored unparsed, not failed


def _judge_in(
    backend: ScriptedBackend, template: RatingTemplate, variants: list[dict[str, str]]
) -> list[JudgmentRecord]:
    scheduler = Scheduler({"j": backend})
    ctx = EpisodeContext("e", 0, scheduler, {"judge:j": RoleBinding("j")})

    async def main() -> list[JudgmentRecord]:
        task = asyncio.ensure_future(
            ask_judge(ctx, template, variants[0], judge_model="j", panel="p", target_idx=1, shorter=variants[1:])
        )
        await scheduler.drive(task)
        return task.result()

    return asyncio.run(main())


def check(judge: str, turn: int, answer: float | None) -> JudgmentRecord:
    return JudgmentRecord(
        panel="p",
        judge=judge,
        mode="yesno",
        template="challenging_turn",
        target_idx=turn,
        criterion="yes",
        score=answer,
        raw_text="",
        parsed=answer is not None,
    )


def test_the_first_challenging_turn_needs_a_strict_majority_of_parsed_verdicts() -> None:
    verdicts = [check("a", 1, 1.0), check("b", 1, 0.0), check("a", 2, 0.0), check("b", 2, None)]
    verdicts += [check("a", 3, 1.0), check("b", 3, None), check("a", 4, 1.0), check("b", 4, 1.0)]
    assert first_challenging_turn(verdicts, 4) == 3  # turn 1 a tie, turn 2 a no, turn 3 the one parsed yes
    assert first_challenging_turn(verdicts[:4], 4) is None
    assert first_challenging_turn([check("a", 1, None)], 1) is None


def test_a_pair_is_won_only_in_both_orders_and_the_panel_votes() -> None:
    wins_both = PairVerdict("a", 1.0, 1.0)
    loses_both = PairVerdict("b", -1.0, -1.0)
    always_a = PairVerdict("c", 1.0, -1.0)  # picked position A twice: prefers neither response
    split_tie = PairVerdict("d", 1.0, 0.0)
    unparsed = PairVerdict("e", None, 1.0)
    assert always_a.position_biased and not wins_both.position_biased
    assert pair_outcome([wins_both]) == 1.0
    assert pair_outcome([loses_both]) == -1.0
    assert pair_outcome([always_a]) == 0.0 and pair_outcome([split_tie]) == 0.0
    assert pair_outcome([wins_both, loses_both]) == 0.0
    assert pair_outcome([wins_both, always_a, split_tie]) == 1.0
    assert pair_outcome([unparsed]) is None and pair_outcome([]) is None
    scores = {s.metric: s.value for s in pair_scores([wins_both, always_a, unparsed], panel="p", player="x--y")}
    assert scores == {"pair_outcome": 1.0, "position_bias": 0.5}


def test_published_scripts_get_their_kinds_and_turns() -> None:
    path = PEERS / "simulbench_all.jsonl"
    if not path.is_file():
        pytest.skip(f"SimulBench's published scripts are not here: {path} (../shared absent)")
    loaded = read_simulbench_file(path)
    assert isinstance(loaded, ScriptSet) and len(loaded.scripts) == 500
    kinds = {kind: sum(s.kind == kind for s in loaded.scripts) for kind in ("LastOnly", "FirstChan", "SubseqChan")}
    assert kinds["LastOnly"] == 225  # turn_num 0, as the paper counts
    assert kinds["FirstChan"] + kinds["SubseqChan"] == 275  # the hard subset
    assert all(s.history[-1].role == "user" and 1 <= s.turn <= 4 for s in loaded.scripts)


def test_bad_published_files_fail_with_the_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "scripts.jsonl"
    row = {"id": 1, "source_id": "t", "act": "T", "task_description": "d", "type": "stateful", "turn_num": 0}
    bad.write_text(json.dumps({**row, "dialogue_history": [{"role": "assistant", "content": "hi"}]}) + "\n")
    with pytest.raises(ApplianceError, match=r"record 1: dialogue_history\[0\] must be a user message"):
        read_simulbench_file(bad)
    bad.write_text(json.dumps({**row, "type": "both", "dialogue_history": [{"role": "user", "content": "x"}]}))
    with pytest.raises(ApplianceError, match="field 'type'"):
        read_simulbench_file(bad)
    bad.write_text('{"id": 1}\n{oops\n')
    with pytest.raises(ApplianceError, match="line 2: not valid JSON"):
        read_simulbench_file(bad)


def good_and_bad(name: str, request: GenerationRequest) -> str:
    """smollm2 answers well and judges kindly; gemma answers badly. Judges rate by the reply's text."""
    role = role_of(request)
    text = request.messages[-1].content
    if role == "user_agent":
        return '{"strategy": "harder", "request": "a harder request"}'
    if role.startswith("judge-"):
        if "better" in (request.grammar or ""):  # pairwise: prefer the good answer in either position
            a_part = text.split("Reply A:")[1].split("Reply B:")[0]
            return '{"better": "A"}' if "good" in a_part else '{"better": "B"}'
        if "answer" in (request.grammar or ""):  # challenging turn: a harder request is
            asked = text.split("Request at this turn:")[1].split("The system's reply:")[0]
            return '{"answer": "yes"}' if "a harder request" in asked else '{"answer": "no"}'
        return '{"score": 9}' if "good answer" in text.split("Reply to grade:")[1] else '{"score": 2}'
    return "good answer" if name == "smollm2-135m" else "bad answer"


def test_the_pipeline_runs_stage_after_stage_resumes_and_reports(tmp_path: Path) -> None:
    catalog = load_catalog(REPO / "models.toml")
    players = ["smollm2-135m", "gemma3-270m"]
    config = RunConfig(
        scenarios=["simulbench"],
        players=players,
        interrogator="smollm2-135m",
        panel=Panel(name="p", judges=["smollm2-135m", "gemma3-270m"]),
        limit=2,
        turns=3,
        models_file=str(catalog.source),
        simulator="smollm2-135m",
    )
    with Store.open(tmp_path / "db.duckdb") as store:
        summary = Runner(catalog, store, scripted_factory(good_and_bad)).execute(
            config, [load_family("simulbench", store=store)]
        )
        # 2 tasks x 3 dialogues; each dialogue: turn 1 fine, turn 2 (the harder request) challenging -> 2 scripts
        assert summary.episodes_total == 6 + 6 + 12 * 2 + 12 and summary.episodes_failed == 0
        report = build_simulbench_report(RunView(store, summary.run_id, "simulbench"))
        resumed = Runner(catalog, store, scripted_factory(good_and_bad)).resume(summary.run_id)
        rescored = rescore_run(
            store,
            catalog,
            summary.run_id,
            Panel(name="q", judges=["gemma3-270m"]),
            backend_factory=scripted_factory(good_and_bad),
        )
        by_panel = store.query(
            "SELECT split_part(e.instance_id, '/', 1), s.panel, s.metric, count(*), avg(s.value) FROM scores s "
            "JOIN episodes e USING (episode_id) WHERE s.metric IN ('rating', 'pair_outcome') GROUP BY ALL ORDER BY ALL"
        )
        stages = store.query(
            "SELECT split_part(instance_id, '/', 1), player, count(*) FROM episodes GROUP BY ALL ORDER BY ALL"
        )
    assert resumed.episodes_skipped == resumed.episodes_total == summary.episodes_total
    assert rescored.episodes == 24 + 12  # evaluate and compare are judged again; collect and extract are not
    assert by_panel == [
        ("compare", "p", "pair_outcome", 12, 1.0),
        ("compare", "q", "pair_outcome", 12, 1.0),
        ("evaluate", "p", "rating", 24, 5.5),
        ("evaluate", "q", "rating", 24, 5.5),
    ]
    assert stages == [
        ("collect", "smollm2-135m", 6),
        ("compare", "smollm2-135m--gemma3-270m", 12),
        ("evaluate", "gemma3-270m", 12),
        ("evaluate", "smollm2-135m", 12),
        ("extract", "smollm2-135m", 6),
    ]
    rows = {row.player: row for row in report.rows}
    assert rows["smollm2-135m"].all.mean == 9.0 and rows["gemma3-270m"].all.mean == 2.0
    assert rows["smollm2-135m"].hard.n == 12 and set(rows["smollm2-135m"].by_kind) == {"FirstChan", "SubseqChan"}
    assert set(rows["gemma3-270m"].by_turn) == {"2", "3"}
    pair = next(p for p in report.pairs if p.subset == "all")
    assert (pair.first, pair.compared, pair.win, pair.lose) == ("smollm2-135m", 12, 100.0, 0.0)
    assert report.collection is not None and report.collection.scripts == {
        "LastOnly": 0,
        "FirstChan": 6,
        "SubseqChan": 6,
    }
    assert report.collection.strategies == {"harder": 12}


def _evaluated(
    run_id: str,
    script: str,
    meta: tuple[str, str, str],
    player: str,
    rating: float | None,
    scenario: str = "simulbench",
) -> EpisodeRecord:
    task, task_type, kind = meta
    return hand_episode(
        run_id,
        scenario,
        f"evaluate/{script}",
        player,
        scores={"rating": rating},
        panel="p",
        metadata={"stage": "evaluate", "script": script, "task": task, "task_type": task_type, "kind": kind},
    )


def test_report_compares_models_on_one_script_set_without_perfect_scripts(tmp_path: Path) -> None:
    scripts = {  # script: (task, type, kind), ratings of a and b
        "s1": (("calc", "stateless", "FirstChan"), 4.0, 2.0),
        "s2": (("calc", "stateless", "LastOnly"), 6.0, 4.0),
        "s3": (("shell", "stateful", "FirstChan"), 8.0, 6.0),
        "s4": (("shell", "stateful", "SubseqChan"), 10.0, 10.0),  # perfect for every model: dropped
        "s5": (("shell", "stateful", "FirstChan"), 9.0, None),  # b has no rating: left out for both
    }
    episodes = [
        _evaluated("hand", script, meta, player, rating)
        for script, (meta, a, b) in scripts.items()
        for player, rating in (("a", a), ("b", b))
    ]
    with Store.open(tmp_path / "hand.duckdb") as store:
        config = {"scenarios": ["simulbench"], "panel": {"name": "p", "judges": ["j"]}}
        store_hand_run(store, "hand", config, episodes)
        report = build_simulbench_report(RunView(store, "hand", "simulbench"))
        headline = simulbench_headline(RunView(store, "hand", "simulbench"), None)
    assert (report.common_scripts, report.perfect_dropped, report.incomplete_scripts) == (3, 1, 1)
    assert report.perfect_decided_by == "the 2 players of run hand"
    # compare and the page see the same scripts as the report: s4 and s5 are not among the units
    assert sorted({unit.key for unit in headline.units}) == ["s1", "s2", "s3"]
    rating, hard = headline.metrics
    for player, (all_mean, hard_mean) in {"a": (6.0, 6.0), "b": (4.0, 4.0)}.items():
        own = [unit for unit in headline.units if unit.player == player]
        assert rating.statistic(own) == pytest.approx(all_mean) and hard.statistic(own) == pytest.approx(hard_mean)
    rows = {row.player: row for row in report.rows}
    assert rows["a"].all.mean == pytest.approx(6.0) and rows["b"].all.mean == pytest.approx(4.0)
    assert (rows["a"].all.n, rows["b"].unrated) == (3, 1)
    assert rows["a"].hard.mean == pytest.approx(6.0)  # s1 and s3
    # stateless / stateful on FirstChan scripts only: s1 (calc) and s3 (shell)
    assert {k: c.mean for k, c in rows["a"].by_task_type.items()} == {"stateless": 4.0, "stateful": 8.0}
    # tasks from the hardest: calc (4, 2, 6, 4 -> 4.0), then shell (8, 6 -> 7.0)
    assert [(t.task, t.mean) for t in report.hardest_tasks] == [("calc", 4.0), ("shell", 7.0)]
    assert report.hardest_tasks[0].by_player == {"a": 5.0, "b": 3.0}


def test_a_script_longer_than_the_players_context_is_counted_as_not_fitting_not_as_unrated(tmp_path: Path) -> None:
    """A small model cannot read a long script's history: the report says so apart from real failures."""
    meta = ("calc", "stateless", "FirstChan")
    episodes = [_evaluated("fit", f"s{i}", meta, "a", 5.0) for i in (1, 2, 3)]
    episodes.append(_evaluated("fit", "s1", meta, "b", 3.0))
    for script, error in (("s2", overflow_message("b", 2300, 2048, None)), ("s3", "the judge's grammar failed")):
        metadata = {"stage": "evaluate", "script": script, "task": "calc", "kind": "FirstChan"}
        episodes.append(hand_episode("fit", "simulbench", f"evaluate/{script}", "b", error=error, metadata=metadata))
    with Store.open(tmp_path / "fit.duckdb") as store:
        store_hand_run(store, "fit", {"scenarios": ["simulbench"], "panel": {"name": "p", "judges": ["j"]}}, episodes)
        report = build_simulbench_report(RunView(store, "fit", "simulbench"))
    rows = {row.player: row for row in report.rows}
    assert (rows["b"].not_fitting, rows["b"].unrated) == (1, 1)
    assert (rows["a"].not_fitting, rows["a"].unrated) == (0, 0)
    assert report.common_scripts == 1 and rows["a"].all.n == rows["b"].all.n == 1


def test_hardest_and_simplest_tasks_are_ten_of_each_type_as_the_papers_table(tmp_path: Path) -> None:
    """12 stateless tasks rated 1.0, 1.5, ..., 6.5 and 3 stateful ones: per type the ten hardest, then
    the simplest of the rest (never a task twice); stateless before stateful, as the paper's columns."""
    episodes = [
        _evaluated("hand", f"l{i:02d}", (f"less{i:02d}", "stateless", "LastOnly"), "a", 1.0 + 0.5 * i)
        for i in range(12)
    ] + [_evaluated("hand", f"f{i}", (f"full{i}", "stateful", "LastOnly"), "a", 2.0 + i) for i in range(3)]
    with Store.open(tmp_path / "tasks.duckdb") as store:
        store_hand_run(store, "hand", {"scenarios": ["simulbench"], "panel": {"name": "p", "judges": ["j"]}}, episodes)
        report = build_simulbench_report(RunView(store, "hand", "simulbench"))
    hardest = [(t.task_type, t.task) for t in report.hardest_tasks]
    assert hardest == [("stateless", f"less{i:02d}") for i in range(10)] + [("stateful", f"full{i}") for i in range(3)]
    assert [t.task for t in report.simplest_tasks] == ["less11", "less10"]  # the rest, simplest first


def test_cluster_bootstrap_resamples_whole_tasks() -> None:
    values = [1.0] * 4 + [9.0] * 4
    tasks = ["a"] * 4 + ["b"] * 4
    low, high = cluster_bootstrap_interval(values, tasks, seed=1) or (0.0, 0.0)
    assert (low, high) == (1.0, 9.0)  # two tasks: every draw is all-a, all-b or one of each
    narrow = bootstrap_interval(values, seed=1)
    assert narrow is not None and narrow[1] - narrow[0] < high - low  # scripts one by one look far surer
    assert cluster_bootstrap_interval([], []) is None


def test_a_run_without_a_simulator_is_refused_before_anything_is_stored(tmp_path: Path) -> None:
    catalog = load_catalog(REPO / "models.toml")
    config = RunConfig(
        scenarios=["simulbench"],
        players=["smollm2-135m"],
        interrogator="smollm2-135m",
        panel=Panel(name="p", judges=["smollm2-135m"]),
        limit=1,
        models_file=str(catalog.source),
    )
    with Store.open(tmp_path / "db.duckdb") as store:
        with pytest.raises(ApplianceError, match="--simulator"):
            Runner(catalog, store, scripted_factory()).execute(config, [load_family("simulbench", store=store)])
        assert store.query("SELECT count(*) FROM runs") == [(0,)]


def test_stored_scripts_are_evaluated_with_new_players_without_collecting_again(tmp_path: Path) -> None:
    catalog = load_catalog(REPO / "models.toml")
    first = RunConfig(
        scenarios=["simulbench"],
        players=["smollm2-135m"],
        interrogator="smollm2-135m",
        simulator="smollm2-135m",
        panel=Panel(name="p", judges=["smollm2-135m"]),
        limit=1,
        turns=3,
        models_file=str(catalog.source),
    )
    with Store.open(tmp_path / "db.duckdb") as store:
        collected = Runner(catalog, store, scripted_factory(good_and_bad)).execute(
            first, [load_family("simulbench", store=store)]
        )
        spec = f"simulbench:{collected.run_id}"
        later = first.model_copy(
            update={"scenarios": [spec], "players": ["gemma3-270m"], "simulator": None, "limit": None}
        )
        factory = scripted_factory(good_and_bad)
        reused = Runner(catalog, store, factory).execute(later, [load_family(spec, store=store)])
        stages = store.query(
            "SELECT split_part(instance_id, '/', 1), count(*) FROM episodes WHERE run_id = ? GROUP BY ALL",
            [reused.run_id],
        )
        scripts = store.query(
            "SELECT DISTINCT instance_id FROM episodes WHERE instance_id LIKE 'evaluate/%' ORDER BY 1"
        )
        report = build_simulbench_report(RunView(store, reused.run_id, spec))
        stored = store.run(reused.run_id).config["families"][spec]["snapshot"]
    assert stages == [("evaluate", 3 * 2)]  # 3 dialogues x 2 scripts, answered by the new player only
    assert len(scripts) == 6, "both runs evaluated the same scripts"
    assert [role_of(r) for r in factory.opened["gemma3-270m"].requests].count("user_agent") == 0
    assert report.rows[0].player == "gemma3-270m" and report.rows[0].all.mean == 2.0
    # the script set's perfect scripts were decided by the run that made it, and stored with the later run
    assert stored == {"perfect_scripts": [], "perfect_decided_by": report.perfect_decided_by}
    assert report.perfect_decided_by == f"nobody: run {collected.run_id} has one player, and one player decides none"


def test_perfect_scripts_belong_to_the_script_set_and_one_player_decides_none(tmp_path: Path) -> None:
    """The source run's players a and b decide: s1 is perfect for both. A later run of player c on those
    scripts drops s1 (rated 7 by c) and keeps s2 (c's 10): c's mean is (10 + 8) / 2. One player alone
    keeps its 10s: [10, 10, 6, 8] stays 8.5 (dropping them would give 7.0)."""
    meta = ("calc", "stateless", "LastOnly")
    source = {"s1": {"a": 10.0, "b": 10.0}, "s2": {"a": 10.0, "b": 7.0}, "s3": {"a": 6.0, "b": 8.0}}
    panel = {"name": "p", "judges": ["j"]}
    with Store.open(tmp_path / "sets.duckdb") as store:
        src = [_evaluated("src", s, meta, p, r) for s, ratings in source.items() for p, r in ratings.items()]
        store_hand_run(store, "src", {"scenarios": ["simulbench"], "panel": panel}, src)
        decided = perfect_scripts_of_run(RunView(store, "src", "simulbench"))
        spec = "simulbench:src"
        later = [_evaluated("later", s, meta, "c", r, spec) for s, r in {"s1": 7.0, "s2": 10.0, "s3": 8.0}.items()]
        # stored as runs were before `families`: the snapshot under `family_settings`, which reports still read
        store_hand_run(store, "later", {"scenarios": [spec], "panel": panel, "family_settings": {spec: decided}}, later)
        again = build_simulbench_report(RunView(store, "later", spec))
        headline = simulbench_headline(RunView(store, "later", spec), None)
        alone = [_evaluated("one", f"o{i}", meta, "a", r) for i, r in enumerate([10.0, 10.0, 6.0, 8.0])]
        store_hand_run(store, "one", {"scenarios": ["simulbench"], "panel": panel}, alone)
        single = build_simulbench_report(RunView(store, "one", "simulbench"))
    assert decided == {"perfect_scripts": ["s1"], "perfect_decided_by": "the 2 players of run src"}
    assert (again.common_scripts, again.perfect_dropped, again.perfect_decided_by) == (2, 1, "the 2 players of run src")
    assert again.rows[0].all.mean == pytest.approx(9.0)
    assert sorted(unit.key for unit in headline.units) == ["s2", "s3"]  # the gate and the page drop s1 too
    assert single.perfect_dropped == 0 and single.rows[0].all.mean == pytest.approx(8.5)
    assert single.perfect_decided_by.startswith("nobody: run one has one player")


def test_a_likelihood_panel_reads_a_pair_and_a_pairwise_calibration_decides_it_with_its_tie_band() -> None:
    """Under a likelihood panel a comparison's raw outcome is the sign of the judges' mean direct
    preference, and a judge leaning to a slot more than it prefers is counted position-biased; a
    `pair_features` calibration of `instruction_likelihood` (as PandaLM's pairs ship) then decides the
    outcome from the features, a tie inside its band."""
    from datetime import datetime

    from appliance.calibration.apply import calibrated_features, calibrated_scores, calibration_key
    from appliance.calibration.features import FeatureCalibration, PairFeatureCalibration, RidgeModel
    from appliance.judging.scoring_templates import POSITION_LEAN, PREFERENCE
    from appliance.scenarios.simulbench.stages import PAIR_LIKELIHOOD_TEMPLATE, CompareStage
    from appliance.scenarios.simulbench.verdicts import read_pair_scores
    from appliance.store.records import CalibrationRecord, JudgmentRecord

    readings: dict[str, dict[str, float] | None] = {
        "a": {PREFERENCE: 0.4, POSITION_LEAN: 0.1},
        "b": {PREFERENCE: -0.1, POSITION_LEAN: 0.9},  # shows the first slot winning in both orders
        "c": None,  # the pair did not fit this judge
    }
    outcome, bias = read_pair_scores(readings, panel="p", player="x--y")
    assert (outcome.metric, outcome.value) == ("pair_outcome", 1.0)
    assert (bias.metric, bias.value) == ("position_bias", 0.5)
    assert read_pair_scores({"a": None}, panel="p", player="x--y")[0].value is None
    flipped = {"a": {PREFERENCE: -0.4, POSITION_LEAN: 0.0}}
    assert read_pair_scores(flipped, panel="p", player="x--y")[0].value == -1.0

    # a calibration that reads the preference alone: predicted = 0.8 * preference, a tie within 0.1
    model = RidgeModel((PREFERENCE,), (0.0,), (1.0,), (0.8,), 0.0, 1.0)
    calibration = PairFeatureCalibration(FeatureCalibration({"a": model}, {"a": 1.0}, (-1.0, 1.0)), 0.1)
    record = CalibrationRecord(
        calibration_id="cal-pairs",
        created_at=datetime(2026, 1, 1),
        panel="p",
        judges=["a"],
        label_set="pandalm",
        criterion="preference",
        template=PAIR_LIKELIHOOD_TEMPLATE,
        seed=0,
        fit_items=[],
        heldout_items=[],
        model=calibration.to_json(),
        metrics={},
    )
    stage = CompareStage.__new__(CompareStage)
    assert stage.calibrated_kind == "pair" and stage.calibrated_metric == "pair_outcome"

    def decided(preference: float) -> float | None:
        judgments = [
            JudgmentRecord(
                panel="p",
                judge="a",
                mode="likelihood",
                template=PAIR_LIKELIHOOD_TEMPLATE,
                target_idx=1,
                criterion=name,
                score=value,
                raw_text="{}",
                parsed=True,
            )
            for name, value in ((PREFERENCE, preference), (POSITION_LEAN, 0.0))
        ]
        raw = read_pair_scores({"a": {PREFERENCE: preference}}, panel="p", player="x--y")
        applied = calibrated_scores(stage, raw, judgments, {calibration_key(stage, "pair_outcome"): record})
        (scored,) = [s for s in applied if s.metric == "pair_outcome"]
        assert scored.calibration_id == "cal-pairs"
        return scored.calibrated_value

    stage.name = "simulbench"
    assert calibration_key(stage, "pair_outcome") == "simulbench:pair_outcome"  # apart from its ratings'
    assert decided(0.5) == 1.0  # 0.4 > 0.1
    assert decided(-0.5) == -1.0
    assert decided(0.1) == 0.0  # 0.08 is inside the band, though the raw sign says the first wins
    # what a run's judges read: the calibration's features; every feature where nothing calibrates the pair
    applied = {calibration_key(stage, "pair_outcome"): record}
    assert calibrated_features(stage, applied) == {"a": frozenset({PREFERENCE})}
    assert calibrated_features(stage, {}) is None


def test_rescoring_under_the_default_panel_decides_the_comparisons_by_its_pairwise_calibration(
    tmp_path: Path,
) -> None:
    """Every SimulBench stage is named `simulbench`: rescoring keeps each stage (not one per name), and the
    comparisons' pairwise calibration is keyed apart from the ratings', so `appliance score` applies the
    shipped PandaLM calibration to the comparisons and to nothing else."""
    from appliance.catalog.panels import get_panel
    from tests.fakes import seed_echo
    from tests.golden_runs import scripted_run

    db = tmp_path / "sb.duckdb"
    scripted_run(db, "simulbench")
    panel = get_panel(REPO / "judges" / "panels.toml", "default")
    catalog = load_catalog(REPO / "models.toml")
    with Store.open(db) as store:
        (run_id,) = [row[0] for row in store.query("SELECT run_id FROM runs", [])]
        rescored = rescore_run(store, catalog, run_id, panel, backend_factory=scripted_factory(seed_echo))
        rows = store.query(
            "SELECT split_part(e.instance_id, '/', 1), s.metric, count(*), count(s.calibration_id) FROM scores s "
            "JOIN episodes e USING (episode_id) WHERE s.panel = 'default' AND s.metric IN ('rating', 'pair_outcome') "
            "GROUP BY ALL ORDER BY ALL",
            [],
        )
        decided = RunView(store, run_id, "simulbench")
        from appliance.scenarios.simulbench.report import pairs_decided_by

        title = pairs_decided_by(decided, "default")
        read = store.query(
            "SELECT DISTINCT j.criterion FROM judgments j JOIN episodes e USING (episode_id) "
            "WHERE j.panel = 'default' AND e.instance_id LIKE 'compare/%' ORDER BY 1",
            [],
        )
    assert "simulbench:pair_outcome" in rescored.calibrations
    # the shipped calibration reads direct preference and length: no response is read on its own
    assert [row[0] for row in read] == ["position_lean", "preference", "tokens"]
    (compared, rated) = rows
    assert compared[:2] == ("compare", "pair_outcome") and compared[2] == compared[3] > 0
    assert rated[:2] == ("evaluate", "rating") and rated[3] == 0
    assert title.startswith("the panel's preference calibrated on pandalm")
