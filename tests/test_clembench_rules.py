"""clembench game masters with scripted players: perfect play, aborts, losses, parse-rule edges,
generators, published instances and the golden aggregation of clemcore's reference run."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.catalog.models import load_catalog
from appliance.catalog.panels import Panel
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.scripted import ScriptedBackend
from appliance.engine.types import GenerationRequest
from appliance.episodes.client import RoleBinding
from appliance.episodes.context import EpisodeContext
from appliance.episodes.scheduler import Scheduler
from appliance.errors import ApplianceError
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import load_family
from appliance.scenarios.clembench.caps import MARGIN, SENTENCE_CHARS
from appliance.scenarios.clembench.family import ClembenchFamily, play_game
from appliance.scenarios.clembench.games import variant_names
from appliance.scenarios.clembench.generate import generate_instance_set
from appliance.scenarios.clembench.grids import cell_f1, parse_grid, widest_grids
from appliance.scenarios.clembench.instances import ClemInstance
from appliance.scenarios.clembench.master import GameTable, Outcome
from appliance.scenarios.clembench.privateshared import parse_probe
from appliance.scenarios.clembench.published import read_published
from appliance.scenarios.clembench.report import (
    MIN_EPISODES_PER_ROW,
    EpisodeResult,
    aggregate,
    build_clem_report,
    game_row,
)
from appliance.scenarios.clembench.results import import_results
from appliance.scenarios.clembench.taboo import taboo_hits
from appliance.scenarios.clembench.wordle import Keywords, NotInWordList, feedback, parse_guess
from appliance.store import EpisodeRecord, Store
from appliance.store.run_view import RunView
from appliance.util.agreement import cohen_kappa
from tests.fakes import conversation_of, hand_episode, scripted_factory, store_hand_run

REPO = Path(__file__).resolve().parent.parent
GAMES = tuple(variant_names())
DATA = REPO / "scenarios" / "clembench"
PEERS = REPO.parent / "shared" / "datasets" / "peers"
Responder = Callable[[str, list[str]], str]  # (seat name, user messages so far) -> reply


def instance_of(game: str, seed: int = 0) -> ClemInstance:
    return next(i for i in generate_instance_set(DATA, seed).instances if i.game == game)


def play(instance: ClemInstance, respond: Responder) -> tuple[Outcome, GameTable]:
    def backend_reply(request: GenerationRequest) -> str:
        seat = conversation_of(request).split("/")[1]
        return respond(seat, [m.content for m in request.messages if m.role == "user"])

    scheduler = Scheduler({"m": ScriptedBackend("m", backend_reply)})
    roles = {"player": RoleBinding("m"), "partner": RoleBinding("m")}
    table = GameTable(EpisodeContext("e", 0, scheduler, roles))

    async def main() -> Outcome:
        task = asyncio.ensure_future(play_game(table, instance))
        await scheduler.drive(task)
        return task.result()

    return asyncio.run(main()), table


def perfect(instance: ClemInstance) -> Responder:
    """A player who knows the instance's answer and every format."""
    p = instance.params

    def respond(seat: str, said: list[str]) -> str:
        if instance.game.startswith("wordle"):
            if seat == "critic":
                return "agreement: yes\nexplanation: it fits the clue"
            return f"explanation: I know it\nguess: {p['target']}"
        if instance.game == "taboo":
            return "CLUE: a thing you know well" if seat == "describer" else f"GUESS: {p['target']}"
        if instance.game == "imagegame":
            if seat == "instruction follower":
                return str(p["target_grid"])
            return "Instruction: draw the whole figure" if len(said) == 1 else "Instruction: DONE"
        if instance.game == "referencegame":
            answer_tag, tag = p["answer_tag"], p["expression_tag"]  # our instances carry their tags
            return f"{tag} the one" if seat == "instruction giver" else f"{answer_tag} {p['target_names'][0]}"
        # privateshared: answer the asked slot; a slot is known once its request was asked
        last, earlier = said[-1], " ".join(said[:-1])
        for slot, question in p["requests"].items():
            if last.endswith(question):
                return f"ANSWER: It is {p['slots'][slot]}."
        slot = next(s for s, probe in p["probes"].items() if last.endswith(probe))
        return "ASIDE: yes" if p["requests"][slot] in earlier else "ASIDE: no"

    return respond


@pytest.mark.parametrize("game", GAMES)
def test_a_perfect_player_reaches_quality_100(game: str) -> None:
    outcome, table = play(instance_of(game), perfect(instance_of(game)))
    assert (outcome.status, outcome.main_score) == ("success", 100.0)
    assert table.requests.violated == 0 and table.requests.parsed == table.requests.total > 0


@pytest.mark.parametrize("game", GAMES)
def test_a_reply_without_the_required_tag_aborts(game: str) -> None:
    outcome, table = play(instance_of(game), lambda seat, said: "Sure! Here is my answer.")
    assert outcome.status == "aborted" and outcome.main_score is None
    assert table.requests.violated >= 1


def test_taboo_words_match_whole_words_and_inflections_not_substrings() -> None:
    assert taboo_hits("it has wheels and a carpet", ["car"]) == []
    assert taboo_hits("two cars parked", ["car"]) == ["car"]
    assert taboo_hits("I was running late", ["run"]) == ["run"]
    assert taboo_hits("drinking from a glass", ["drink"]) == ["drink"]
    assert taboo_hits("Water!", ["water"]) == ["water"]
    assert taboo_hits("a scarf", ["car", "scar"]) == []


def test_taboo_clue_with_a_taboo_word_loses_without_aborting() -> None:
    instance = instance_of("taboo")
    taboo_word = instance.params["related"][0]
    outcome, _ = play(instance, lambda seat, said: f"CLUE: think of {taboo_word}s" if seat == "describer" else "")
    assert (outcome.status, outcome.main_score) == ("lose", 0.0)


def test_taboo_wrong_guesses_lose_and_a_late_hit_scores_by_turn() -> None:
    instance = instance_of("taboo")
    outcome, _ = play(instance, lambda seat, said: "CLUE: a hint" if seat == "describer" else "GUESS: nothing")
    assert (outcome.status, outcome.main_score, outcome.extra["Repetition-Guesser"]) == ("lose", 0.0, 2.0)

    def second_time(seat: str, said: list[str]) -> str:
        if seat == "describer":
            return "CLUE: a hint"
        return f"GUESS: {instance.params['target']}" if len(said) == 2 else "GUESS: nothing"

    outcome, _ = play(instance, second_time)
    assert outcome.status == "success" and outcome.main_score == pytest.approx(50.0)


def test_wordle_feedback_counts_repeated_letters() -> None:
    assert feedback("speed", "abide") == ["red", "red", "yellow", "red", "yellow"]
    assert feedback("eerie", "there") == ["yellow", "red", "yellow", "red", "green"]
    assert feedback("crane", "crane") == ["green"] * 5


def test_wordle_guess_parsing() -> None:
    words = frozenset({"crane", "house"})
    assert parse_guess("explanation: common letters\nguess: Crane", Keywords(), 5, words) == ("crane", "common letters")
    with pytest.raises(NotInWordList):
        parse_guess("guess: zzzzz", Keywords(), 5, words)
    for broken in ("guess: cranes", "guess: two words", "I guess crane", "guess: crane\nguess: house", "guess: cr4ne"):
        with pytest.raises(ValueError):
            parse_guess(broken, Keywords(), 5, words)


def test_wordle_unknown_words_are_reprompted_then_abort() -> None:
    instance = instance_of("wordle")
    target = instance.params["target"]
    outcome, table = play(instance, lambda seat, said: f"guess: {'qqqqq' if len(said) < 3 else target}\nexplanation: x")
    assert outcome.status == "success" and outcome.main_score == 100.0 and table.requests.violated == 2
    outcome, _ = play(instance, lambda seat, said: "guess: qqqqq\nexplanation: x")
    assert outcome.status == "aborted"


def test_wordle_six_wrong_guesses_lose_and_speed_scores() -> None:
    instance = instance_of("wordle")
    target = instance.params["target"]
    other = next(w for w in instance.params["words"] if w != target)
    outcome, _ = play(instance, lambda seat, said: f"guess: {other}\nexplanation: x")
    assert (outcome.status, outcome.main_score, outcome.extra["Guess Repetitions"]) == ("lose", 0.0, 5.0)
    outcome, _ = play(instance, lambda seat, said: f"guess: {target if len(said) == 5 else other}\nexplanation: x")
    assert outcome.main_score == 30.0  # clembench's speed score for a win at attempt 5
    clue = instance_of("wordle_withclue")
    outcome, _ = play(clue, lambda seat, said: f"guess: {clue.params['target'] if len(said) == 4 else other}")
    assert outcome.main_score == 25.0  # the variants score 100 / attempts


def test_wordle_critic_must_say_yes_or_no() -> None:
    instance = instance_of("wordle_withcritic")
    outcome, _ = play(
        instance,
        lambda seat, said: "agreement: maybe" if seat == "critic" else f"guess: {instance.params['target']}",
    )
    assert outcome.status == "aborted"


def test_grid_parsing_and_cell_f1() -> None:
    target = parse_grid("X ▢ ▢ ▢ ▢\n▢ X ▢ ▢ ▢\n▢ ▢ X ▢ ▢\n▢ ▢ ▢ X ▢\n▢ ▢ ▢ ▢ X")
    half = parse_grid("X ▢ ▢ ▢ ▢\n▢ X ▢ ▢ ▢\n▢ ▢ ▢ ▢ ▢\n▢ ▢ ▢ ▢ ▢\n▢ ▢ ▢ ▢ Y")
    assert cell_f1(target, target) == (100, 100, 100)
    assert cell_f1(target, half) == (67, 40, 50)
    for broken in ("X X X X\n" * 5, "x ▢ ▢ ▢ ▢\n" * 5, "X ▢ ▢ ▢ ▢\n" * 4):
        with pytest.raises(ValueError):
            parse_grid(broken)


def test_imagegame_partial_drawing_loses_with_its_f1() -> None:
    instance = instance_of("imagegame")
    empty = "\n".join(["▢ ▢ ▢ ▢ ▢"] * 5)
    outcome, _ = play(
        instance,
        lambda seat, said: (
            empty if seat == "instruction follower" else ("Instruction: go" if len(said) < 3 else "Instruction: done")
        ),
    )
    assert (outcome.status, outcome.main_score) == ("lose", 0.0)
    assert len(outcome.turn_scores) == 2


def test_referencegame_wrong_pick_loses_and_languages_have_their_own_tags() -> None:
    family = generate_instance_set(DATA, 0).instances
    german = next(i for i in family if i.game == "referencegame" and i.language == "de")
    wrong = next(a for a in ("erste", "zweite", "dritte") if a not in german.params["target_names"])
    outcome, _ = play(german, lambda seat, said: "Ausdruck: das Kreuz" if seat != "guesser" else f"Antwort: {wrong}")
    assert (outcome.status, outcome.main_score) == ("lose", 0.0)
    outcome, _ = play(german, lambda seat, said: "Expression: the cross")  # the English tag breaks the German rules
    assert outcome.status == "aborted"
    # clembench's multilingual languages that we could write, beside English (Telugu and Turkmen left out)
    assert {i.language for i in family if i.game == "referencegame"} == {"en", "de", "it", "pt", "tr", "zh", "ja"}


def test_privateshared_probe_parsing_and_kappa() -> None:
    tags = {"aside": "ASIDE:", "yes": "yes", "no": "no"}
    assert parse_probe("ASIDE: Yes, they do.", tags) == 1
    assert parse_probe("ASIDE: no", tags) == 0
    assert parse_probe("ASIDE: maybe", tags) is None
    assert parse_probe("ASIDE: yes\nand more", tags) is None
    assert parse_probe("yes", tags) is None
    assert cohen_kappa([0, 0, 1, 1], [0, 0, 1, 1]) == 1.0
    assert cohen_kappa([0, 1, 0, 1], [1, 1, 1, 1]) == 0.0


def test_privateshared_values_given_away_early_count_as_known() -> None:
    instance = instance_of("privateshared")
    everything = "ANSWER: " + ", ".join(instance.params["slots"].values())

    def is_probe(said: list[str]) -> bool:
        return said[-1].splitlines()[-1].startswith("ME:")

    def knows_all_after_first_answer(seat: str, said: list[str]) -> str:
        answered = any(not message.splitlines()[-1].startswith("ME:") for message in said[:-1])
        return ("ASIDE: yes" if answered else "ASIDE: no") if is_probe(said) else everything

    outcome, _ = play(instance, knows_all_after_first_answer)
    assert (outcome.status, outcome.main_score) == ("success", 100.0)
    outcome, _ = play(instance, lambda seat, said: "ASIDE: no" if is_probe(said) else everything)
    assert outcome.status == "lose" and outcome.extra["Slot-Filling-Accuracy"] == 1.0
    assert outcome.extra["Kappa"] == 0.0 and outcome.main_score == 0.0


def test_generation_is_seeded_and_covers_every_game() -> None:
    first, again, other = (generate_instance_set(DATA, seed) for seed in (5, 5, 6))
    assert first == again
    assert [i.params for i in first.instances] != [i.params for i in other.instances]
    assert {i.game for i in first.instances} == set(GAMES)


@pytest.mark.parametrize(
    ("language", "describe", "answer_prefix", "run_on"),
    [
        ("zh", "描述：一个十字", "答案：", "方格图"),  # no space ends a Chinese word: the answer may run on
        ("ja", "説明：十字の形", "答え：", "です"),
        ("tr", "İfade: bir haç", "Cevap: ", ""),
    ],
)
def test_referencegame_in_the_papers_other_languages_reads_its_own_answers(
    language: str, describe: str, answer_prefix: str, run_on: str
) -> None:
    family = generate_instance_set(DATA, 0).instances
    instance = next(i for i in family if i.game == "referencegame" and i.language == language)
    right = instance.params["target_names"][0]
    wrong = next(a for a in instance.params["answers"] if a != right)
    for pick, expected in ((right, ("success", 100.0)), (wrong, ("lose", 0.0))):
        reply = answer_prefix + pick + run_on

        def replies(seat: str, said: list[str], reply: str = reply) -> str:
            return describe if seat != "guesser" else reply

        outcome, _ = play(instance, replies)
        assert (outcome.status, outcome.main_score) == expected
    if language == "tr":  # the prompt's own spelling, capital dotted I, names the second grid too
        second = instance.params["answers"][1]
        expected = ("success", 100.0) if second in instance.params["target_names"] else ("lose", 0.0)
        outcome, _ = play(instance, lambda seat, said: describe if seat != "guesser" else "Cevap: İkinci")
        assert (outcome.status, outcome.main_score) == expected
    if language in ("zh", "ja"):  # an ASCII colon closes the tag as well as the full-width one
        outcome, _ = play(
            instance,
            lambda seat, said: describe.replace("：", ":") if seat != "guesser" else f"{answer_prefix[:-1]}:{right}",
        )
        assert (outcome.status, outcome.main_score) == ("success", 100.0)
    if language == "tr":  # a word-spaced language still needs the answer word to end
        outcome, _ = play(instance, lambda seat, said: describe if seat != "guesser" else f"{answer_prefix}{right}lik")
        assert outcome.status == "aborted"


def test_limit_counts_per_game_row_and_spreads_over_experiments() -> None:
    """A row is a game in one language, as the report keeps them: each other language gets its own episodes."""
    family = load_family("clembench", seed=1)
    assert isinstance(family, ClembenchFamily)
    chosen = [i for i in family.select_instances(family.instances(), 2, 0) if isinstance(i, ClemInstance)]
    rows = Counter(game_row(i.game, i.language) for i in chosen)
    assert rows == dict.fromkeys(
        [*GAMES, *(f"referencegame_{code}" for code in ("de", "it", "pt", "tr", "zh", "ja"))], 2
    )
    assert all(len({i.experiment for i in chosen if game_row(i.game, i.language) == row}) == 2 for row in rows)
    default = family.select_instances(family.instances(), MIN_EPISODES_PER_ROW, 0)
    assert len(default) == len(rows) * MIN_EPISODES_PER_ROW  # the default run: 10 episodes in every row


def test_cross_play_pairs_models_in_two_player_games_and_reports_pairs(tmp_path: Path) -> None:
    catalog = load_catalog(REPO / "models.toml")
    family = load_family("clembench", seed=2)
    players = ["smollm2-135m", "gemma3-270m"]
    config = RunConfig(
        scenarios=["clembench"],
        players=players,
        interrogator=players[0],
        panel=Panel(name="none", judges=["smollm2-135m"]),
        limit=1,
        models_file=str(catalog.source),
        cross_play=True,
    )
    instances = {i.id: i for i in family.stages()[0].instances()}

    def respond(name: str, request: GenerationRequest) -> str:
        episode, seat, _ = conversation_of(request).rsplit("/", 2)  # instance ids hold "/" too
        instance = instances[episode.split(":")[2]]
        assert isinstance(instance, ClemInstance)
        said = [m.content for m in request.messages if m.role == "user"]
        return perfect(instance)(seat, said) if name == "smollm2-135m" else "no idea"

    factory = scripted_factory(respond)

    with Store.open(tmp_path / "db.duckdb") as store:
        summary = Runner(catalog, store, factory).execute(config, [family])
        report = build_clem_report(RunView(store, summary.run_id, "clembench"))
    # --limit 1 plays one instance per game row: referencegame has seven (en, de, it, pt, tr, zh, ja)
    two_player = 10  # wordle_withcritic, taboo, imagegame, referencegame x 7
    assert summary.episodes_total == (len(GAMES) + 6) * 2 + two_player * 2
    rows = {row.player: row for row in report.rows}
    assert set(rows) == set(players), "clemscore is ranked on self-play only"
    crossed = {row.player: row for row in report.cross_play}
    assert set(crossed) == {"smollm2-135m--gemma3-270m", "gemma3-270m--smollm2-135m"}
    assert rows["smollm2-135m"].clemscore == pytest.approx(100.0)
    assert rows["gemma3-270m"].played == 0.0 and rows["gemma3-270m"].clemscore == 0.0
    games = {
        g.game.split("_")[0] if g.game.startswith("referencegame") else g.game
        for g in crossed["gemma3-270m--smollm2-135m"].games
    }
    assert games == {"wordle_withcritic", "taboo", "imagegame", "referencegame"}


def test_aggregation_follows_clemcore() -> None:
    results = [
        EpisodeResult("a", False, 100.0),
        EpisodeResult("a", True, None),  # a: 50% played, quality 100
        EpisodeResult("b", False, 0.0, lost=True),
        EpisodeResult("b", False, 50.0),  # b: 100% played, quality 25
    ]
    figures = aggregate(results)
    assert figures.played == {"a": 50.0, "b": 100.0}
    assert figures.quality == {"a": 100.0, "b": 25.0}
    assert figures.clemscore == pytest.approx(75.0 * 62.5 / 100)


GOLDEN = PEERS / "clemcore_golden_run"


@pytest.mark.skipif(not GOLDEN.is_dir(), reason=f"clemcore's golden run is not at {GOLDEN}")
def test_golden_run_aggregates_to_clemcores_published_figures(tmp_path: Path) -> None:
    import csv

    with (GOLDEN / "golden_results.csv").open() as handle:
        golden = next(csv.DictReader(handle))
    with Store.open(tmp_path / "db.duckdb") as store:
        run_id, episodes, _ = import_results(store, GOLDEN / "runs-v2-llama8b.zip")
        (row,) = build_clem_report(RunView(store, run_id, "clembench")).rows
    assert episodes == 817
    assert round(row.clemscore or 0, 2) == float(golden["-, clemscore"]) == 28.09
    assert round(row.played, 2) == pytest.approx(float(golden["all, Average % Played"]), abs=0.005)
    assert round(row.quality or 0, 2) == float(golden["all, Average Quality Score"])
    assert len(row.games) == 14
    for game in row.games:
        assert round(game.played, 2) == float(golden[f"{game.game}, % Played"]), game.game
        assert round(game.quality or 0, 2) == float(golden[f"{game.game}, Quality Score"]), game.game
        expected_std = golden[f"{game.game}, Quality Score (std)"]
        assert (round(game.quality_std, 2) if game.quality_std is not None else "") == (
            float(expected_std) if expected_std else ""
        ), game.game


@pytest.mark.skipif(not (PEERS / "clembench").is_dir(), reason="clembench's published instances are not in ../shared")
def test_published_instances_are_read_as_they_are() -> None:
    published = read_published(PEERS / "clembench", DATA)
    by_game = {game: [i for i in published.instances if i.game == game] for game in GAMES}
    assert {game: len(items) for game, items in by_game.items() if items} == {
        "wordle": 30,
        "taboo": 60,
        "imagegame": 40,
        "referencegame": 90,
        "privateshared": 50,
    }
    taboo = by_game["taboo"][0]
    assert taboo.params["target"] in taboo.params["describer_prompt"] and "$" not in taboo.params["describer_prompt"]
    assert by_game["imagegame"][0].params["target_grid"] in by_game["imagegame"][0].params["giver_prompt"]
    things = next(i for i in by_game["privateshared"] if i.experiment == "things-places")
    assert set(things.params["requests"]) == set(things.params["slots"])
    # the published imagegame and a perfect player agree on the published parse patterns
    outcome, _ = play(
        by_game["imagegame"][0],
        lambda seat, said: (
            by_game["imagegame"][0].params["target_grid"]
            if seat == "instruction follower"
            else ("Command: draw it" if len(said) == 1 else "Command: DONE")
        ),
    )
    assert outcome.main_score == 100.0


def test_bad_results_and_instance_files_are_clear_errors(tmp_path: Path) -> None:
    with Store.open(tmp_path / "db.duckdb") as store:
        with pytest.raises(ApplianceError, match="neither a folder nor a zip"):
            import_results(store, Path(__file__))
        bad = tmp_path / "runs" / "pair" / "taboo" / "exp" / "episode_0"
        bad.mkdir(parents=True)
        (bad / "scores.json").write_text("{}")
        with pytest.raises(ApplianceError, match="episode scores"):
            import_results(store, tmp_path / "runs")
        assert store.query("SELECT count(*) FROM runs")[0][0] == 0
    with pytest.raises(ApplianceError, match="cannot read an instance set"):
        load_family(f"clembench:{Path(__file__).parent / 'conftest.py'}")
    other = tmp_path / "other.json"
    other.write_text('{"format": "something else"}')
    with pytest.raises(ApplianceError, match="field 'format'"):
        load_family(f"clembench:{other}")
    with pytest.raises(ApplianceError, match="neither a file, a folder nor a stored instance set"):
        load_family("clembench:no-such-set")


def test_an_episode_that_failed_to_run_counts_as_aborted_with_its_cause(tmp_path: Path) -> None:
    def episode(index: int, scores: dict[str, float] | None, error: str | None = None) -> EpisodeRecord:
        metadata = {"game": "taboo", "experiment": "high"}
        return hand_episode(
            "hand", "clembench", f"taboo/high/{index}", "m", scores=scores, metadata=metadata, error=error
        )

    episodes = [
        episode(0, {"Aborted": 0.0, "Main Score": 100.0}),
        episode(1, {"Aborted": 0.0, "Main Score": 50.0}),
        episode(2, None, error="prompt of 2104 tokens does not fit the context of 2048 tokens of model 'm'"),
    ]
    with Store.open(tmp_path / "hand.duckdb") as store:
        store_hand_run(store, "hand", {"scenarios": ["clembench"]}, episodes)
        report = build_clem_report(RunView(store, "hand", "clembench"))
    (row,) = report.rows
    # 1 of 3 episodes aborted (it failed to run): 66.7% played, not 100%; quality over the two played
    assert row.played == pytest.approx(200 / 3) and row.quality == pytest.approx(75.0)
    assert row.clemscore == pytest.approx(200 / 3 * 75 / 100)
    assert (row.episodes, row.failed) == (3, 1)
    assert row.failures == {"prompt of N tokens does not fit the context of N tokens of model 'm'": 1}
    (game,) = row.games
    assert (game.aborted, game.failed, game.won) == (1, 1, 2)


def test_languages_are_rows_of_their_own_and_compared_with_english(tmp_path: Path) -> None:
    def episode(index: int, language: str, aborted: float, main: float | None) -> EpisodeRecord:
        scores = {"Aborted": aborted, **({"Main Score": main} if main is not None else {})}
        metadata = {"game": "referencegame", "language": language, "experiment": f"compact_grids_{language}"}
        instance = f"referencegame/compact_grids_{language}/{index}"
        return hand_episode("lang", "clembench", instance, "m", scores=scores, metadata=metadata)

    episodes = [
        episode(0, "en", 0.0, 100.0),
        episode(1, "en", 0.0, 50.0),  # English: 100% played, quality 75
        episode(2, "de", 0.0, 100.0),
        episode(3, "de", 1.0, None),  # German: 50% played, quality 100
    ]
    with Store.open(tmp_path / "lang.duckdb") as store:
        store_hand_run(store, "lang", {"scenarios": ["clembench"]}, episodes)
        report = build_clem_report(RunView(store, "lang", "clembench"))
    (row,) = report.rows
    assert {g.game for g in row.games} == {"referencegame", "referencegame_de"}, "German is not pooled with English"
    assert row.clemscore == pytest.approx(75.0)  # from the English game, as the paper's Table 1
    (german,) = report.languages
    assert (german.game, german.language, german.played, german.quality) == ("referencegame", "de", 50.0, 100.0)
    assert (german.played_change, german.quality_change) == (-50.0, 25.0)


def seat_caps(instance: ClemInstance) -> dict[str, int]:
    """Each seat's token cap when a perfect player plays `instance` (scripted: one token per character)."""
    _, table = play(instance, perfect(instance))
    backend = table.ctx.scheduler.backends["m"]
    assert isinstance(backend, ScriptedBackend)
    return {conversation_of(r).split("/")[1]: r.sampling.max_tokens for r in backend.requests}


def test_token_caps_fit_the_longest_reply_each_instance_asks_for() -> None:
    drawing = instance_of("imagegame")
    caps = seat_caps(drawing)
    empty_grid = "\n".join(" ".join(["▢"] * 5) for _ in range(5))
    assert caps["instruction follower"] == len(empty_grid) + MARGIN  # every cell may be drawn
    assert caps["instruction giver"] == len("instruction: ") + SENTENCE_CHARS + MARGIN
    wordle = seat_caps(instance_of("wordle_withcritic"))
    # the explanation comes first: a whole sentence, then the guess line
    assert wordle["guesser"] == len(f"explanation: {'x' * SENTENCE_CHARS}\nguess: xxxxx") + MARGIN
    assert wordle["critic"] == len(f"agreement: yes\nexplanation: {'x' * SENTENCE_CHARS}\n") + MARGIN
    taboo = instance_of("taboo")
    longest = max([taboo.params["target"], *taboo.params["related"]], key=len)
    assert seat_caps(taboo)["guesser"] == len(f"GUESS: {longest}") + MARGIN


def test_the_drawing_cap_is_measured_in_smollm2_tokens(smollm2: LlamaCppBackend) -> None:
    """The follower's cap is the longest candidate grid in SmolLM2's own tokens (54 here), plus the margin."""
    drawing = instance_of("imagegame")
    target = parse_grid(drawing.params["target_grid"])
    scheduler = Scheduler({"smollm2-135m": smollm2})
    roles = {"player": RoleBinding("smollm2-135m"), "partner": RoleBinding("smollm2-135m")}
    table = GameTable(EpisodeContext("e", 0, scheduler, roles))
    follower = table.seat("partner", "instruction follower", *widest_grids(target))
    longest = max(smollm2.count_tokens(grid) for grid in widest_grids(target))
    assert longest == 54 and follower.sampling.max_tokens == longest + MARGIN  # 25 cells, their spaces, the rows
    assert smollm2.count_tokens(drawing.params["target_grid"]) <= longest


def test_replies_cut_by_their_cap_are_counted_per_game(tmp_path: Path) -> None:
    def episode(index: int, reasons: list[str]) -> EpisodeRecord:
        metadata = {"game": "taboo", "experiment": "high"}
        messages = [(f"seat{n}", "text") for n in range(len(reasons))]
        record = hand_episode(
            "cut", "clembench", f"taboo/high/{index}", "m", scores={"Aborted": 0.0, "Main Score": 0.0},
            metadata=metadata, messages=messages,
        )  # fmt: skip
        for message, reason in zip(record.messages, reasons, strict=True):
            message.finish_reason = reason
        return record

    episodes = [episode(0, ["stop", "length", "length"]), episode(1, ["length", "stop"]), episode(2, ["stop"])]
    with Store.open(tmp_path / "cut.duckdb") as store:
        store_hand_run(store, "cut", {"scenarios": ["clembench"]}, episodes)
        report = build_clem_report(RunView(store, "cut", "clembench"))
    (game,) = report.rows[0].games
    assert (game.episodes, game.cut_replies) == (3, 3)
