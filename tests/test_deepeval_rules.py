"""DeepEval with scripted models: the referee's synchronous rounds and anonymity, public goods
arithmetic, word chain rules, the sandbox against hostile code, code review flow, and the waves of
repetitions through the runner down to the report."""

from __future__ import annotations

import asyncio
import json
import math
import re
import shutil
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from rich.console import Console

from appliance.catalog.models import Catalog, ModelSpec, load_catalog
from appliance.catalog.panels import Panel
from appliance.catalog.sampling import Sampling
from appliance.engine.backend import Backend
from appliance.engine.scripted import ScriptedBackend
from appliance.engine.types import GenerationRequest, TokenScores
from appliance.episodes.client import RoleBinding
from appliance.episodes.context import EpisodeContext
from appliance.episodes.scheduler import Scheduler
from appliance.errors import ApplianceError
from appliance.run.rescoring import rescore_run
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.sandbox.isolation import BWRAP_VARIABLE
from appliance.scenarios import load_family
from appliance.scenarios.deepeval.chain_dictionary import idiom_dictionary, noun_dictionary
from appliance.scenarios.deepeval.code_review import extract_code, load_problems, review_is_done
from appliance.scenarios.deepeval.family import TASK_RULES, DeepEvalData, task_rules
from appliance.scenarios.deepeval.public_goods import parse_investment, settle_round
from appliance.scenarios.deepeval.referee import Referee, Seat
from appliance.scenarios.deepeval.render import print_deepeval_report
from appliance.scenarios.deepeval.report import build_deepeval_report
from appliance.scenarios.deepeval.settings import PAPER_PAIRS, DeepEvalSettings
from appliance.scenarios.deepeval.word_chain import extract_move, read_word_list, rule_broken
from appliance.store import Store
from appliance.store.run_view import RunView
from tests.fakes import conversation_of

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "scenarios" / "deepeval"
MODELS = ["smollm2-135m", "gemma3-270m"]
IDIOMS = read_word_list(DATA / "idioms.txt", "idiom", idiom_dictionary())
WORDS = read_word_list(DATA / "words.txt", "english", noun_dictionary())
PROBLEMS = load_problems(DATA / "code_problems.toml")


def test_every_task_has_rules_and_only_writer_editor_tasks_are_judged() -> None:
    from appliance.scenarios.deepeval.tasks import TASKS

    assert set(TASK_RULES) == set(TASKS)
    assert {task for task, rules in TASK_RULES.items() if rules.judge is not None} == {"code_review", "translation"}
    with pytest.raises(ValueError, match="unknown DeepEval task 'chess'"):
        task_rules("chess")


def test_public_goods_payoffs_follow_the_rules() -> None:
    result = settle_round([10, 0, 10, 0], endowment=10, alpha=1.6)
    assert result.income == pytest.approx(8.0)  # 1.6 x 20 / 4
    assert result.gains == pytest.approx([8.0, 18.0, 8.0, 18.0])
    nobody = settle_round([0, 0, 0], endowment=10, alpha=2.0)
    assert nobody.income == 0 and nobody.gains == [10, 10, 10]
    assert parse_investment('{"reason": "half", "coins": 5}', 10) == parse_investment(
        '{"coins": 5, "reason": "half"}', 10
    )
    assert parse_investment('{"reason": "all", "coins": 10}', 10).amount == 10
    for bad in ('{"reason": "x", "coins": 11}', '{"coins": -1}', '{"coins": 2.5}', '{"coins": "5"}',
                '{"coins": true}', "five coins", "[5]"):  # fmt: skip
        investment = parse_investment(bad, 10)
        assert investment.violation and investment.amount == 0, bad


def scripted_context(
    respond: Callable[[GenerationRequest], str], models: dict[str, str]
) -> tuple[EpisodeContext, Scheduler]:
    backends: dict[str, Backend] = {name: ScriptedBackend(name, respond) for name in set(models.values())}
    scheduler = Scheduler(backends)
    roles = {role: RoleBinding(model) for role, model in models.items()}
    return EpisodeContext("run:deepeval:x:y", 7, scheduler, roles), scheduler


def drive(scheduler: Scheduler, coroutine: Coroutine[Any, Any, T]) -> T:
    async def main() -> T:
        task = asyncio.ensure_future(coroutine)
        await scheduler.drive(task)
        return task.result()

    return asyncio.run(main())


def test_no_participant_sees_a_message_of_its_own_round() -> None:
    #: (seat, how many requests the seat has made so far including this one, the prompt's text)
    prompts: list[tuple[str, int, str]] = []

    def respond(request: GenerationRequest) -> str:
        seat = conversation_of(request).rsplit("/", 2)[1]
        asked = 1 + sum(1 for s, _, _ in prompts if s == seat)
        prompts.append((seat, asked, "\n".join(message.content for message in request.messages)))
        return f"<{seat} round {asked}>"

    ctx, scheduler = scripted_context(respond, {"player": "a", "partner": "b"})
    names = ["Player 1", "Player 2", "Player 3"]
    referee = Referee(ctx, [Seat(name, "player" if k % 2 == 0 else "partner", "rules") for k, name in enumerate(names)])

    async def three_rounds() -> None:
        for _ in range(3):
            await referee.collect(names, sampling=Sampling(), forward_to=lambda seat: [n for n in names if n != seat])
            referee.end_round()

    drive(scheduler, three_rounds())
    assert len(prompts) == 9
    for seat, asked_in, prompt in prompts:
        tags = re.findall(r"<(Player \d) round (\d)>", prompt)
        # what a seat sees at its k-th request are the messages of rounds 1..k-1, never round k
        assert all(int(number) < asked_in for _, number in tags)
        assert sorted({int(number) for sender, number in tags if sender != seat}) == list(range(1, asked_in))
    pool = ctx.metadata["pool"]
    assert isinstance(pool, list) and len(pool) == 3
    assert [m["sender"] for m in pool[0]["messages"]] == names
    assert pool[0]["messages"][0]["recipients"] == ("Player 2", "Player 3")
    assert [m.speaker for m in ctx.messages] == names * 3 and {m.model for m in ctx.messages} == {"a", "b"}
    assert ctx.metadata["seats"] == {"Player 1": "a", "Player 2": "b", "Player 3": "a"}


def test_idiom_and_word_chain_rules() -> None:
    assert rule_broken("意气风发", "一心一意", set(), IDIOMS) is None
    assert rule_broken("意气风发", "一心一意", {"意气风发"}, IDIOMS) == "'意气风发' was already used"
    assert rule_broken("发扬光大", "一心一意", set(), IDIOMS) == "'发扬光大' does not start with '意'"
    assert rule_broken("意意意意", "一心一意", set(), IDIOMS) == "'意意意意' is not in the dictionary"
    assert rule_broken("", "一心一意", set(), IDIOMS) == "no answer"
    assert extract_move("好的，意气风发。", "idiom") == "意气风发"  # noqa: RUF001
    assert extract_move("I do not know", "idiom") == ""
    assert extract_move("**Elephant**, because", "english") == "elephant"
    assert rule_broken("tiger", "elephant", set(), WORDS) is None
    assert rule_broken("rabbit", "tiger", {"rabbit"}, WORDS) == "'rabbit' was already used"
    assert len(IDIOMS.items) >= 300 and all(len(idiom) == 4 for idiom in IDIOMS.items)
    assert all(IDIOMS.continuations(opening) for opening in IDIOMS.openings())
    assert len(WORDS.items) >= 300 and len(WORDS.openings()) == len(WORDS.items)


def test_a_word_list_with_a_bad_entry_is_refused_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "idioms.txt"
    bad.write_text("# comment\n一心一意\n意气风发吧\n", encoding="utf-8")
    with pytest.raises(ApplianceError, match=r"idioms.txt:3: '意气风发吧' is not a valid idiom entry"):
        read_word_list(bad, "idiom")


def test_code_extraction_and_the_reviewers_done_word() -> None:
    reply = "Here:\n```python\ndef f():\n    return 1\n```\nand better:\n```python\ndef f():\n    return 2\n```"
    assert extract_code(reply) == "def f():\n    return 2"
    assert extract_code("```\ndef g(): pass") == "def g(): pass"  # cut off by the token limit
    assert extract_code("def h(): pass") == "def h(): pass"
    assert review_is_done(" done. ", "DONE") and review_is_done("**DONE**", "DONE")
    assert not review_is_done("Not done yet: handle empty lists.", "DONE")


def test_the_public_goods_game_is_played_at_the_papers_alpha() -> None:
    """DeepEval section 3.7.1: 100 invested in total at alpha = 1.2 becomes 120, split among 4 players
    (its example says "two of three" and then divides by 4): 30 each, non-investors included."""
    settings = DeepEvalSettings.load(DATA / "deepeval.toml")
    goods = settings.public_goods
    assert (goods.alpha, goods.rounds, goods.endowment, goods.seats) == (1.2, 5, 10, 4)
    example = settle_round([50, 50, 0, 0], endowment=100, alpha=goods.alpha)
    assert example.income == pytest.approx(30.0)
    assert example.gains == pytest.approx([80.0, 80.0, 130.0, 130.0])  # kept + 30 each
    # four seats giving everything for five rounds own 60 coins each (80 at the 1.6 used before)
    assert sum(settle_round([10] * 4, goods.endowment, goods.alpha).gains[0] for _ in range(5)) == pytest.approx(60)
    assert "more coins than any other player" in goods.system  # the paper's goal: the most coins of all


def deepeval_plan(seed: int, limit: int) -> list[str]:
    """The translation pairs a default run plays: repetitions 0..limit-1 of the seeded plan."""
    plan = DeepEvalData(DATA, REPO / "judges", seed)
    return [plan.passages[plan.instance("translation", r).item].pair for r in range(limit)]


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_every_paper_pair_is_translated_within_the_default_plan(seed: int) -> None:
    """The paper's three pairs (Tables 4-6), each played in the first three repetitions and twice in
    the default --limit 6, whatever the seed; the other shipped passages only when asked for."""
    pairs = deepeval_plan(seed, 6)
    assert sorted(pairs[:3]) == sorted(PAPER_PAIRS)
    assert all(pairs.count(pair) == 2 for pair in PAPER_PAIRS)
    assert "English->Chinese" in pairs
    assert set(deepeval_plan(seed, 9)) == set(PAPER_PAIRS)  # up to `max`: no other pair


def test_more_pairs_are_played_only_when_listed_and_a_pair_without_passages_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "deepeval"
    shutil.copytree(DATA, folder)
    settings = folder / "deepeval.toml"
    text = settings.read_text(encoding="utf-8")
    settings.write_text(text.replace('"German->English"]', '"German->English", "English->Spanish"]'), encoding="utf-8")
    plan = DeepEvalData(folder, REPO / "judges", 0)
    played = [plan.passages[plan.instance("translation", r).item].pair for r in range(4)]
    assert played[3] == "English->Spanish" and sorted(played[:3]) == sorted(PAPER_PAIRS)
    settings.write_text(text.replace('"German->English"]', '"German->English", "Klingon->English"]'), encoding="utf-8")
    with pytest.raises(ApplianceError, match=r"deepeval.toml: translation pair 'Klingon->English' has no passage"):
        DeepEvalData(folder, REPO / "judges", 0)


def scripted_models(catalog: Catalog, spec: ModelSpec, *, parallel: int) -> ScriptedBackend:
    """smollm2 plays well (invests everything, knows the lists, writes the reference solution,
    approves), gemma3 badly (free-rides, gives up, writes junk, always objects); the smollm2 judge rates
    the first role 7 and the second 5, the gemma3 judge 5 and 3.
    Public goods investments alternate with the repetition, so those payoffs never settle."""
    name = spec.name
    references = {problem.description: problem.reference for problem in PROBLEMS}
    good = name == "smollm2-135m"

    def respond(request: GenerationRequest) -> str:
        episode, seat, _ = conversation_of(request).rsplit("/", 2)
        text = "\n".join(message.content for message in request.messages)
        if seat.startswith("judge-"):
            first, second = re.findall(r'\\"(\w+)\\": \{', request.grammar or "")
            scores = (7, 5) if good else (5, 3)
            verdict = {role: {"evaluation": "e", "score": s} for role, s in zip((first, second), scores, strict=True)}
            return json.dumps(verdict)
        if seat.startswith("Player") and request.grammar is not None:
            repetition = int(re.findall(r"/r(\d+):", episode)[-1])
            return json.dumps({"reason": "r", "coins": 10 if good and repetition % 2 == 0 else 0})
        if seat.startswith("Player"):
            if not good:
                return "I pass"
            words = IDIOMS if "「" in text else WORDS
            used = set(re.findall(r"[\u4e00-\u9fff]{4}|[a-z]+", text.split("chain")[-1]))
            needed = re.findall(r"「(.)」|letter '(.)'", text)[-1]
            start = needed[0] or needed[1]
            return next((w for w in sorted(words.items) if w[0] == start and w not in used), "I give up")
        if seat == "Programmer":
            problem = text.split("Problem: ", 1)[1].split("\n")[0]
            return f"```python\n{references[problem]}```" if good else "```python\ndef nothing():\n    pass\n```"
        if seat == "Reviewer":
            return "DONE" if good else "This is wrong: handle the edge cases."
        return "Ein übersetzter Text."

    return ScriptedBackend(name, respond)


def role_ratings_read(request: GenerationRequest) -> TokenScores:
    """A reading judge that rates writers near 3 and editors near 8: the log-probability of the last
    role's value in the scored continuation is -|value - centre|."""
    assert request.scoring is not None
    role, value = re.findall(r'"(\w+)": \{"score": (\d+)', request.scoring.continuation)[-1]
    centre = 3 if role in ("Programmer", "Translator") else 8
    return TokenScores(token_logprobs=(-abs(int(value) - centre),), choice_logprobs=())


def deepeval_config(catalog: Catalog, players: list[str], limit: int | None, scenario: str) -> RunConfig:
    return RunConfig(
        scenarios=[scenario],
        players=players,
        interrogator=players[0],
        panel=Panel(name="p", judges=MODELS),
        limit=limit,
        models_file=str(catalog.source),
    )


def test_a_scripted_run_is_anonymous_and_pays_each_model_and_role(tmp_path: Path) -> None:
    catalog = load_catalog(REPO / "models.toml")
    backends: list[ScriptedBackend] = []

    def factory(catalog: Catalog, spec: ModelSpec, *, parallel: int) -> ScriptedBackend:
        backends.append(scripted_models(catalog, spec, parallel=parallel))
        return backends[-1]

    def reading_factory(catalog: Catalog, spec: ModelSpec, *, parallel: int) -> ScriptedBackend:
        backend = scripted_models(catalog, spec, parallel=parallel)
        backend.scorer = role_ratings_read
        return backend

    with Store.open(tmp_path / "db.duckdb") as store:
        config = deepeval_config(catalog, MODELS, 1, "deepeval")
        summary = Runner(catalog, store, factory).execute(config, [load_family("deepeval", store=store)])
        report = build_deepeval_report(RunView(store, summary.run_id, "deepeval"))
        rescored = rescore_run(
            store, catalog, summary.run_id, Panel(name="q", judges=["gemma3-270m"]), backend_factory=factory
        )
        by_gemma = build_deepeval_report(RunView(store, summary.run_id, "deepeval"), panel="q")
        reading = Panel(name="lik", judges=["gemma3-270m"], judging="likelihood")
        rescore_run(store, catalog, summary.run_id, reading, backend_factory=reading_factory)
        read = store.query("SELECT DISTINCT mode, template FROM judgments WHERE panel = 'lik'")
        calls = store.query(
            "SELECT count(*), count(DISTINCT raw_text), count(DISTINCT target_idx) FROM judgments"
            " WHERE panel = 'p' GROUP BY episode_id, judge"
        )
        by_reading = build_deepeval_report(RunView(store, summary.run_id, "deepeval"), panel="lik")
        pools = store.query("SELECT metadata FROM episodes WHERE run_id = ?", [summary.run_id])
    assert summary.episodes_total == 6 * 2 and summary.episodes_failed == 0  # 6 tasks x both orders of the pair
    prompts = [m.content for backend in backends for request in backend.requests for m in request.messages]
    assert prompts and not [p for p in prompts if re.search(r"smollm|gemma|135m|270m", p, re.IGNORECASE)]
    assert all(json.loads(metadata)["pool"] for (metadata,) in pools)
    payoff = {(row.task, row.model, row.role): (row.payoff.mean, row.payoff.n) for row in report.symmetric}
    assert payoff[("public_goods_mode1", "smollm2-135m", "player")] == (30.0, 2)  # gives 10 a round, gets 1.2 x 20 / 4
    assert payoff[("public_goods_mode2", "gemma3-270m", "player")] == (80.0, 2)  # keeps 10, gets 6
    assert payoff[("idiom_chain", "smollm2-135m", "player")] == (1.0, 2)
    assert payoff[("word_chain", "gemma3-270m", "player")] == (0.0, 2)
    roles = {(row.task, row.model, row.role): row for row in report.asymmetric}
    # both roles are paid the referee's rating (the judges' 7 and 5, 5 and 3); tests passed beside it
    assert roles[("code_review", "smollm2-135m", "programmer")].payoff.mean == 6.0
    assert roles[("code_review", "gemma3-270m", "reviewer")].payoff.mean == 4.0
    assert roles[("code_review", "smollm2-135m", "programmer")].extras == {"tests:programmer": 1.0}
    assert roles[("code_review", "gemma3-270m", "programmer")].extras == {"tests:programmer": 0.0}
    assert roles[("translation", "gemma3-270m", "translator")].payoff.mean == 6.0
    # each judge rated both roles of an episode in one call: two records (one per role's last message), one text
    assert len(calls) == 4 * 2 and set(calls) == {(2, 1, 2)}
    assert {role for (task, _, role) in roles if task == "translation"} == {"translator", "proofreader"}
    # another panel re-rates the writer-editor roles from the stored transcripts; the games keep their rule scores
    assert rescored.episodes == 12
    again = {(row.task, row.model, row.role): row.payoff.mean for row in by_gemma.asymmetric}
    assert (
        again[("code_review", "gemma3-270m", "reviewer")]
        == again[("translation", "smollm2-135m", "proofreader")]
        == 3.0
    )
    assert again[("code_review", "smollm2-135m", "programmer")] == 5.0
    assert [row.payoff.mean for row in by_gemma.symmetric] == [row.payoff.mean for row in report.symmetric]
    # a panel that reads probabilities reads the role ratings (nothing sampled): scores between the integers
    assert read == [("expected", "deepeval_role_rating")]
    # the reading judge's log-probability of a value is -|value - 3| for the writers, -|value - 8| for the editors
    assert len(by_reading.asymmetric) == len(report.asymmetric) == 8  # 2 tasks x 2 roles x 2 models
    for row in by_reading.asymmetric:
        centre = 3 if row.role in ("programmer", "translator") else 8
        shares = {v: math.exp(-abs(v - centre)) for v in range(1, 11)}
        assert row.payoff.mean == pytest.approx(sum(v * s for v, s in shares.items()) / sum(shares.values()))
    marginals = {(m.task, m.model): m for m in report.chain_marginals}
    assert set(marginals) == {(task, model) for task in ("idiom_chain", "word_chain") for model in MODELS}
    early = next(c for c in report.chain_positions if c.task == "idiom_chain" and c.early == "smollm2-135m")
    assert marginals[("idiom_chain", "smollm2-135m")].early_win == early.early_win  # one opponent: its only cell
    hits = {(row.task, row.model): row.extras["hits"] for row in report.symmetric if "hits" in row.extras}
    assert hits[("idiom_chain", "smollm2-135m")] == 0.5  # one valid move when it starts, none when it answers a pass


def test_code_review_needs_kernel_isolation_or_the_users_explicit_consent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BWRAP_VARIABLE, str(tmp_path / "no-bwrap-here"))
    catalog = load_catalog(REPO / "models.toml")
    config = deepeval_config(catalog, ["smollm2-135m"], 1, "deepeval")
    with Store.open(tmp_path / "db.duckdb") as store:
        with pytest.raises(ApplianceError, match=r"deepeval runs model-written code .* --unsafe-code-execution"):
            Runner(catalog, store, scripted_models).execute(config, [load_family("deepeval", store=store)])
        assert store.query("SELECT count(*) FROM runs") == [(0,)]  # refused before anything was stored
        unsafe = config.model_copy(update={"unsafe_code_execution": True})
        summary = Runner(catalog, store, scripted_models).execute(unsafe, [load_family("deepeval", store=store)])
        report = build_deepeval_report(RunView(store, summary.run_id, "deepeval"))
        (metadata,) = store.query(
            "SELECT metadata FROM episodes WHERE run_id = ? AND instance_id LIKE 'code_review/%'", [summary.run_id]
        )[0]
    tests = json.loads(metadata)["tests"]
    assert tests["status"] == "passed" and tests["passed"] == tests["total"]  # smollm2 writes the reference
    assert tests["isolation"]["kernel"].startswith("none: --unsafe-code-execution")
    assert tests["isolation"]["claimed seccomp"] == "filter installed"
    assert report.unsafe_code_execution
    console = Console(record=True, width=200)
    print_deepeval_report(console, report)
    assert "WITHOUT kernel isolation" in console.export_text()


def test_repetitions_continue_only_while_a_tasks_payoffs_are_unstable(tmp_path: Path) -> None:
    folder = tmp_path / "deepeval"
    shutil.copytree(DATA, folder)
    settings = (folder / "deepeval.toml").read_text(encoding="utf-8")
    settings = (
        settings.replace("initial = 3", "initial = 2")
        .replace("step = 2", "step = 1")
        .replace("max = 9", "max = 4")
        .replace("tolerance = 0.1", "tolerance = 0.05")
    )
    (folder / "deepeval.toml").write_text(settings, encoding="utf-8")
    catalog = load_catalog(REPO / "models.toml")
    spec = f"deepeval:{folder}"
    with Store.open(tmp_path / "db.duckdb") as store:
        config = deepeval_config(catalog, ["smollm2-135m"], None, spec)
        summary = Runner(catalog, store, scripted_models).execute(config, [load_family(spec, store=store)])
        resumed = Runner(catalog, store, scripted_models).resume(summary.run_id)
        report = build_deepeval_report(RunView(store, summary.run_id, spec))
    needed = {task.task: (task.repetitions, task.stable) for task in report.repetitions}
    # self-play public goods alternates 60 (all give 10) and 50 coins: never within 0.05 x its range of 80,
    # so played to max
    assert needed["public_goods_mode1"] == (4, False) and needed["public_goods_mode2"] == (4, False)
    # the paper's spread (its box plots, the least and most won): 60, 50, 60, 50 coins
    spreads = {row.task: row.payoff.spread for row in report.symmetric if row.task.startswith("public_goods")}
    assert spreads == {"public_goods_mode1": (50, 50, 55, 60, 60), "public_goods_mode2": (50, 50, 55, 60, 60)}
    # outcomes (chain points) are judged by a Wilson interval: two identical results are not enough;
    # the judges' constant ratings of both writer-editor tasks are
    assert needed["idiom_chain"] == (4, False)
    assert needed["code_review"] == needed["translation"] == (2, True)
    assert summary.episodes_total == 6 * 2 + 4 * 2 and summary.episodes_failed == 0
    assert resumed.episodes_skipped == resumed.episodes_total == summary.episodes_total
    # the report reads the rules stored with the run, not the file as it is now
    (folder / "deepeval.toml").write_text(settings.replace("tolerance = 0.05", "tolerance = 0.5"), encoding="utf-8")
    with Store.open(tmp_path / "db.duckdb") as store:
        later = build_deepeval_report(RunView(store, summary.run_id, spec))
    assert later.tolerance == 0.05 and later.settings_source == "run"
    assert later.repetitions == report.repetitions
    # a run stored before `families` kept the snapshot under `family_settings`: it reads and resumes the same
    with Store.open(tmp_path / "db.duckdb") as store:
        stored = store.run(summary.run_id).config
        older = {key: value for key, value in stored.items() if key != "families"}
        older |= {"family_settings": {spec: stored["families"][spec]["snapshot"]}, "family_options": {}}
        store.connection.execute("UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(older), summary.run_id])
        assert store.run(summary.run_id).run_config() == RunConfig.model_validate(stored)
        old_shaped = build_deepeval_report(RunView(store, summary.run_id, spec))  # the file still says 0.5
    (folder / "deepeval.toml").write_text(settings, encoding="utf-8")  # a resume loads the family from its files
    with Store.open(tmp_path / "db.duckdb") as store:
        again = Runner(catalog, store, scripted_models).resume(summary.run_id)
    assert old_shaped.tolerance == 0.05 and old_shaped.settings_source == "run"
    assert old_shaped.repetitions == report.repetitions
    assert again.episodes_skipped == again.episodes_total == summary.episodes_total
