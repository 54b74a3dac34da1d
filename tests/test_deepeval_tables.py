"""DeepEval's figures as the paper defines them, on hand-computed data: the stableness rule per
payoff kind, the chain dictionary, N models in one public goods game, the early/late, opponent x
role and language-pair tables, and --exclude-self-judging."""

from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from appliance.catalog.models import Catalog, ModelSpec, load_catalog
from appliance.engine.scripted import ScriptedBackend
from appliance.run.runner import Runner
from appliance.scenarios import load_family
from appliance.scenarios.deepeval.payoffs import stability, wilson_interval
from appliance.scenarios.deepeval.report import (
    ChainPositions,
    DeepEvalReport,
    build_deepeval_report,
    chain_marginals,
    five_numbers,
)
from appliance.scenarios.deepeval.settings import DeepEvalSettings, Repetitions
from appliance.scenarios.deepeval.tasks import task_specs
from appliance.scenarios.deepeval.word_chain import rule_broken
from appliance.store import Store
from appliance.store.run_view import RunView
from appliance.view import collect_contents
from tests.test_deepeval_rules import DATA, IDIOMS, MODELS, REPO, WORDS, deepeval_config, scripted_models

SETTINGS = DeepEvalSettings.load(DATA / "deepeval.toml")


def test_the_spread_is_the_box_plots_five_numbers() -> None:
    assert five_numbers([10.0, 40.0, 20.0, 50.0, 30.0]) == (10.0, 20.0, 30.0, 40.0, 50.0)
    assert five_numbers([50.0, 30.0]) == (30.0, 35.0, 40.0, 45.0, 50.0)  # inclusive quartiles interpolate
    assert five_numbers([7.0]) == (7.0,) * 5 and five_numbers([]) is None


def test_wilson_interval_matches_the_hand_computed_bounds() -> None:
    low, high = wilson_interval([1.0, 1.0, 1.0], 0.95)
    assert low == pytest.approx(0.4385, abs=1e-4) and high == 1.0  # 3 of 3: the textbook 0.438
    assert wilson_interval([1, 0] * 5, 0.95) == pytest.approx((0.2366, 0.7634), abs=1e-4)


def test_each_payoff_kind_has_its_own_stability_rule() -> None:
    rule = Repetitions()  # 95%, tolerance 0.1
    specs = {spec.id: spec for spec in task_specs(SETTINGS.public_goods, players=2)}
    chain = specs["idiom_chain"].payoffs["player"]
    programmer = specs["code_review"].payoffs["programmer"]
    rating = specs["translation"].payoffs["translator"]
    # three identical wins are not yet a stable estimate
    assert not stability([1.0, 1.0, 1.0], chain, rule).stable
    # the programmer is paid the referee's 1-10 rating, as in the paper's Table 3 (tests passed beside it)
    assert (programmer.metric, programmer.kind, programmer.range) == ("rating:programmer", "amount", 9.0)
    # identical outcomes: half-width z^2 / 2(n + z^2) reaches 0.1 at n = 16
    assert not stability([1.0] * 15, chain, rule).stable and stability([1.0] * 16, chain, rule).stable
    # a rating is an amount: judged by its bootstrap interval against the 9-point range
    assert stability([6.0, 6.0, 7.0], rating, rule).limit == pytest.approx(0.9)
    assert stability([6.0, 6.0, 6.0], rating, rule).stable
    # the public goods range depends on how many seats the game has (4 for two models, N from three)
    coins_2 = specs["public_goods_mode1"].payoffs["player"].range
    coins_5 = task_specs(SETTINGS.public_goods, players=5)[0].payoffs["player"].range
    assert coins_2 == pytest.approx(5 * (10 + 1.2 * 3 * 10 / 4 - 1.2 * 10 / 4))
    assert coins_5 == pytest.approx(5 * (10 + 1.2 * 4 * 10 / 5 - 1.2 * 10 / 5))


def test_any_dictionary_idiom_or_noun_counts_not_only_our_list() -> None:
    assert "意犹未尽" not in IDIOMS.items and rule_broken("意犹未尽", "一心一意", set(), IDIOMS) is None
    assert "tornado" not in WORDS.items and rule_broken("tornado", "cat", set(), WORDS) is None
    assert rule_broken("tigers", "cat", set(), WORDS) is None  # plurals of nouns count
    assert rule_broken("quickly", "elephant", set(), WORDS) == "'quickly' is not in the dictionary"
    assert len(IDIOMS.vocabulary) > 10_000 and len(WORDS.vocabulary) > 10_000
    assert set(IDIOMS.openings()) <= IDIOMS.items  # games still open from our own list


def scripted_run(
    tmp_path: Path, players: list[str], *, exclude_self_judging: bool = False, prompts: list[str] | None = None
) -> DeepEvalReport:
    """A `--limit 1` run with the scripted models (see `scripted_models`); a third player is a copy of
    gemma's entry that plays as badly."""
    models = tmp_path / "models.toml"
    text = (REPO / "models.toml").read_text(encoding="utf-8")
    gemma = text.split("[models.gemma3-270m]")[1].split("\n\n")[0]
    models.write_text(f"{text}\n[models.gemma3-copy]{gemma}\n", encoding="utf-8")
    catalog = load_catalog(models)
    config = deepeval_config(catalog, players, 1, "deepeval").model_copy(
        update={"exclude_self_judging": exclude_self_judging}
    )
    backends: list[ScriptedBackend] = []

    def factory(catalog: Catalog, spec: ModelSpec, *, parallel: int) -> ScriptedBackend:
        backends.append(scripted_models(catalog, spec, parallel=parallel))
        return backends[-1]

    with Store.open(tmp_path / "db.duckdb") as store:
        summary = Runner(catalog, store, factory).execute(config, [load_family("deepeval", store=store)])
        assert summary.episodes_failed == 0
        if prompts is not None:  # every system prompt the models were sent
            prompts += [request.messages[0].content for backend in backends for request in backend.requests]
        return build_deepeval_report(RunView(store, summary.run_id, "deepeval"))


def test_three_models_play_one_public_goods_game_a_seat_each(tmp_path: Path) -> None:
    players = [*MODELS, "gemma3-copy"]
    report = scripted_run(tmp_path, players)
    with Store.open(tmp_path / "db.duckdb") as store:
        games = store.query(
            "SELECT player, metadata FROM episodes WHERE instance_id LIKE 'public_goods%' ORDER BY instance_id"
        )
    assert [label for label, _ in games] == ["smollm2-135m+gemma3-270m+gemma3-copy"] * 2
    for _, metadata in games:
        assert sorted(json.loads(metadata)["seats"].values()) == sorted(players)
    payoff = {(row.task, row.model): (row.payoff.mean, row.payoff.n) for row in report.symmetric}
    # smollm gives 10 a round in repetition 0, the others keep theirs: the pool pays 1.2 x 10 / 3 a round
    assert payoff[("public_goods_mode1", "smollm2-135m")] == pytest.approx((5 * 12 / 3, 1))
    assert payoff[("public_goods_mode1", "gemma3-copy")] == pytest.approx((5 * (10 + 12 / 3), 1))
    assert report.public_goods_seating.startswith("all 3 models play one game")
    # the pairwise tasks still pair every ordered pair of distinct models
    assert sum(row.games for row in report.chain_positions if row.task == "word_chain") == 6


def test_the_papers_tables_from_a_scripted_run(tmp_path: Path) -> None:
    prompts: list[str] = []
    report = scripted_run(tmp_path, MODELS, prompts=prompts)
    # the chain players are told what counts: the dictionary and its size
    told = {re.sub(r"Player \d", "P", p) for p in prompts if "chain game" in p}
    assert len(told) == 2 and all(re.search(r"in the referee's (idiom )?dictionary \(about \d\d,000 ", p) for p in told)
    positions = {(r.task, r.early, r.late): r for r in report.chain_positions}
    # smollm knows the list and wins whether it moves first or second; gemma passes at once
    first = positions[("idiom_chain", "smollm2-135m", "gemma3-270m")]
    assert (first.games, first.early_win, first.late_win, first.early_hits, first.late_hits) == (1, 1, 0, 1, 0)
    second = positions[("idiom_chain", "gemma3-270m", "smollm2-135m")]
    assert (second.early_win, second.late_win, second.early_hits, second.late_hits) == (0, 1, 0, 0)
    matrix = {(c.task, c.models): c.payoffs for c in report.role_matrices}
    # the judges rate the first role 7 (smollm) and 5 (gemma), the second 5 and 3, whoever plays
    assert matrix[("code_review", ("smollm2-135m", "gemma3-270m"))] == {"programmer": 6.0, "reviewer": 4.0}
    assert matrix[("code_review", ("gemma3-270m", "smollm2-135m"))] == {"programmer": 6.0, "reviewer": 4.0}
    pairs = {row.pair for row in report.translation_pairs}
    assert len(pairs) == 1 and re.fullmatch(r"\w+->\w+", pairs.pop())
    assert {(row.model, row.role, row.mean) for row in report.translation_pairs} == {
        (model, role, mean) for model in MODELS for role, mean in (("translator", 6.0), ("proofreader", 4.0))
    }
    assert report.self_judging == sorted(MODELS) and not report.excluded_self_judging
    assert "2 models alternate over 4 seats" in report.public_goods_seating


def test_exclude_self_judging_scores_each_player_with_the_other_judges(tmp_path: Path) -> None:
    report = scripted_run(tmp_path, MODELS, exclude_self_judging=True)
    matrix = {(c.task, c.models): c.payoffs for c in report.role_matrices}
    # each judge rates both roles in one verdict, and only its score of the other model's role counts:
    # smollm's code is rated by gemma (5 for a first role), gemma's review by smollm (5 for a second)
    assert matrix[("code_review", ("smollm2-135m", "gemma3-270m"))] == {"programmer": 5.0, "reviewer": 5.0}
    assert matrix[("code_review", ("gemma3-270m", "smollm2-135m"))] == {"programmer": 7.0, "reviewer": 3.0}
    extras = {(row.model, row.role): row.extras for row in report.asymmetric if row.task == "code_review"}
    assert extras[("smollm2-135m", "programmer")] == {"tests:programmer": 1.0}
    assert report.excluded_self_judging


def test_the_headline_and_the_page_show_the_reports_payoffs(tmp_path: Path) -> None:
    """Both orders of a pairing play the same instance: each episode is its own unit, and a metric's n
    counts the episodes that carry it, as the report does."""
    report = scripted_run(tmp_path, MODELS)
    with Store.open(tmp_path / "db.duckdb", read_only=True) as store:
        contents = collect_contents(store, [report.run_id], REPO / "judges", max_transcripts=0)
    (board,) = contents.boards
    shown = {(m.metric, row.label): (round(row.value or -1, 9), row.n) for m in board.metrics for row in m.rows}
    rows = [*report.symmetric, *report.asymmetric]
    assert rows and all(
        shown[(f"{row.task}.{row.role}", row.model)] == (round(row.payoff.mean or -1, 9), row.payoff.n) for row in rows
    )
    assert shown[("public_goods_mode1.player", "smollm2-135m")] == (30.0, 2)  # both orders, not one


#: the paper's Tables 1-2 (Idioms Solitaire): (early, late) -> (win early, win late, hits early, hits late)
PAPER_CHAIN_CELLS = {
    ("GPT-4", "ChatGPT"): (0.33, 0.67, 0.89, 1.11),
    ("GPT-4", "Claude 2"): (0.57, 0.43, 1.29, 1.14),
    ("ChatGPT", "GPT-4"): (0.75, 0.25, 1.12, 0.75),
    ("ChatGPT", "Claude 2"): (0.78, 0.22, 1.11, 0.78),
    ("Claude 2", "GPT-4"): (0.3, 0.7, 0.8, 1.0),
    ("Claude 2", "ChatGPT"): (0.25, 0.75, 0.75, 1.25),
}
#: the marginals the paper prints beside them: model -> (win s̄_E, win s̄_L, hits s̄_E, hits s̄_L)
PAPER_CHAIN_MARGINALS = {
    "GPT-4": ("0.45", "0.48", "1.09", "0.88"),
    "ChatGPT": ("0.77", "0.71", "1.12", "1.18"),
    "Claude 2": ("0.28", "0.33", "0.78", "0.96"),
}


def test_the_papers_chain_cells_give_its_printed_marginals() -> None:
    """Golden: s̄_E and s̄_L are unweighted means over opponents, printed rounded half up (0.475 -> 0.48)."""
    cells = [
        ChainPositions(
            task="idiom_chain", early=early, late=late, games=1, early_win=ew, late_win=lw, early_hits=eh, late_hits=lh
        )
        for (early, late), (ew, lw, eh, lh) in PAPER_CHAIN_CELLS.items()
    ]
    cells.append(
        ChainPositions(
            task="idiom_chain",
            early="GPT-4",
            late="GPT-4",
            games=1,
            early_win=1.0,
            late_win=0.0,
            early_hits=9.0,
            late_hits=0.0,
        )
    )  # self-play: the empty diagonal

    def printed(value: float | None) -> str:
        assert value is not None
        return str(Decimal(repr(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))

    marginals = {m.model: m for m in chain_marginals(cells)}
    assert {
        model: tuple(printed(v) for v in (m.early_win, m.late_win, m.early_hits, m.late_hits))
        for model, m in marginals.items()
    } == PAPER_CHAIN_MARGINALS
