"""PingPong episode logic on a scripted backend: who sees what, and how scores combine."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path

import pytest
from rich.console import Console

from appliance.catalog.models import load_catalog
from appliance.catalog.panels import Panel
from appliance.engine.scripted import ScriptedBackend
from appliance.engine.types import GenerationRequest
from appliance.errors import ApplianceError
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import load_family
from appliance.scenarios.pingpong.family import PingPongFamily, clean_interrogator_message, episode_scores
from appliance.scenarios.pingpong.render import print_leaderboard
from appliance.scenarios.pingpong.report import build_leaderboard, length_factor
from appliance.store import EpisodeRecord, JudgmentRecord, Store
from appliance.store.run_view import RunView
from appliance.view import collect_contents
from tests.fakes import conversation_of, forget_episode, hand_episode, role_of, scripted_factory, store_hand_run

REPO = Path(__file__).resolve().parent.parent


def _text(request: GenerationRequest) -> str:
    return "\n".join(message.content for message in request.messages)


def _verdict(reply: str) -> dict[str, object]:
    return {"in_character": 5 if "long" in reply else 2, "entertaining": 3, "fluent": 4, "refusal": False}


def _responder(request: GenerationRequest) -> str:
    if request.grammar is not None and "turns" in request.grammar:  # a judge reading the whole conversation
        replies = re.findall(r"^\[\d+\] [^:]+: (.*)$", _text(request), flags=re.MULTILINE)
        return json.dumps({"reasoning": "ok", "turns": [_verdict(reply) for reply in replies]})
    if request.grammar is not None:  # a judge of one turn
        return json.dumps(_verdict(_text(request).rsplit("Reply to rate", 1)[1]))
    system = request.messages[0].content
    if "human user" in system or "menschlichen Nutzer" in system or "человека" in system:
        return '"Tell me something."'
    asked = sum(1 for message in request.messages if message.role == "user")
    return "A long answer in character." if asked % 2 == 0 else "Short one."


def _run(
    tmp_path: Path, respond: Callable[[GenerationRequest], str] = _responder, judging: str = "conversation"
) -> tuple[Store, dict[str, ScriptedBackend], str]:
    catalog = load_catalog(REPO / "models.toml")
    folder = tmp_path / "pingpong"
    shutil.copytree(REPO / "scenarios" / "pingpong", folder)
    (folder / "judging.toml").write_text(f'mode = "{judging}"\n')
    family = PingPongFamily.load(folder, REPO / "judges")
    factory = scripted_factory(lambda model, request: respond(request))

    config = RunConfig(
        scenarios=["pingpong"],
        players=["smollm2-135m", "gemma3-270m"],
        interrogator="smollm2-135m",
        panel=Panel(name="default", judges=["smollm2-135m", "gemma3-270m"]),
        seed=5,
        limit=3,
        parallel=4,
        models_file=str(catalog.source),
    )
    store = Store.open(tmp_path / "db.duckdb")
    runner = Runner(catalog, store, backend_factory=factory)
    summary = runner.execute(config, [family])
    run_id = summary.run_id
    assert summary.episodes_finished == 6 and summary.episodes_failed == 0
    return store, factory.opened, run_id


def test_player_never_sees_the_situation_and_interrogator_never_sees_the_card(tmp_path: Path) -> None:
    store, backends, _ = _run(tmp_path)
    family = PingPongFamily.load(REPO / "scenarios" / "pingpong", REPO / "judges")
    descriptions = [card.description.strip()[:60] for card in family.cards]
    situations = [situation.text for situation in family.situations]
    everything = [r for backend in backends.values() for r in backend.requests]
    requests = [r for r in everything if r.grammar is None]
    assert requests
    roles = {role_of(request) for request in requests}
    assert roles == {"interrogator", "player"}
    for request in requests:
        text = _text(request)
        role = role_of(request)
        if role == "interrogator":
            assert any(s in text for s in situations)
            assert not any(d in text for d in descriptions), "interrogator saw a card description"
        else:
            assert any(d in text for d in descriptions)
            assert not any(s in text for s in situations), "player saw the situation"
    judged = [r for r in everything if r.grammar is not None]  # as the authors' judge: the character only
    assert judged and not any(any(s in _text(r) for s in situations) for r in judged), "a judge saw the situation"
    store.close()


@pytest.mark.parametrize("judging", ["conversation", "turn"])
def test_every_player_turn_is_judged_by_every_judge_and_stored(tmp_path: Path, judging: str) -> None:
    store, backends, run_id = _run(tmp_path, judging=judging)
    per_episode = store.query(
        "SELECT e.episode_id, count(DISTINCT m.idx) FILTER (WHERE m.speaker = 'player'), "
        "count(DISTINCT j.judge || '/' || j.target_idx) "
        "FROM episodes e JOIN messages m USING (episode_id) JOIN judgments j USING (episode_id) "
        "WHERE e.run_id = ? GROUP BY e.episode_id",
        [run_id],
    )
    assert len(per_episode) == 6
    for _, player_turns, judged in per_episode:
        assert player_turns == 4  # the paper's four turns
        assert judged == 2 * player_turns
    interrogator_texts = store.query("SELECT DISTINCT text FROM messages WHERE speaker = 'interrogator'")
    assert interrogator_texts == [("Tell me something.",)]
    # the verdict of each turn is the one about that turn's reply, whichever way the judges read it
    scores = store.query(
        "SELECT m.text, j.score FROM judgments j JOIN messages m ON m.episode_id = j.episode_id "
        "AND m.idx = j.target_idx WHERE j.criterion = 'in_character'"
    )
    assert {text: score for text, score in scores} == {"A long answer in character.": 5.0, "Short one.": 2.0}
    judge_requests = [r for b in backends.values() for r in b.requests if r.grammar is not None]
    per_conversation = 1 if judging == "conversation" else 4
    assert len(judge_requests) == 6 * 2 * per_conversation  # episodes x judges x requests per conversation
    templates = {t for (t,) in store.query("SELECT DISTINCT template FROM judgments")}
    assert templates == {f"pingpong_{'conversation' if judging == 'conversation' else 'likert'}"}
    store.close()


def test_unparsed_verdicts_are_stored_and_left_out_of_the_mean(tmp_path: Path) -> None:
    def respond(request: GenerationRequest) -> str:
        if request.grammar is not None and "gemma" in conversation_of(request).rsplit("/", 1)[-1]:
            return '{"reasoning": "cut short", "turns": [{"in_character": 9'
        return _responder(request)

    store, _, _ = _run(tmp_path, respond)
    unparsed = store.query("SELECT count(*) FROM judgments WHERE NOT parsed AND judge = 'gemma3-270m'")[0][0]
    assert unparsed == 6 * 4 * 4  # episodes x turns x (3 criteria + refusal)
    finals = store.query("SELECT value FROM scores WHERE metric = 'unparsed_verdicts'")
    assert {row[0] for row in finals} == {4.0}
    store.close()


def test_episode_scores_average_judges_then_turns_and_drop_only_a_refusing_judge() -> None:
    def verdict(judge: str, turn: int, criterion: str, score: float) -> JudgmentRecord:
        return JudgmentRecord(
            panel="p",
            judge=judge,
            mode="likert",
            target_idx=turn,
            criterion=criterion,
            score=score,
            raw_text="",
            parsed=True,
        )

    def judged(j1_refuses_turn_1: int) -> list[JudgmentRecord]:
        judgments = []
        for criterion, a, b in (("in_character", 5, 3), ("entertaining", 2, 2), ("fluent", 4, 4)):
            judgments += [verdict("j1", 1, criterion, a), verdict("j2", 1, criterion, b)]
        judgments += [verdict("j1", 1, "refusal", j1_refuses_turn_1), verdict("j2", 1, "refusal", 0)]
        for criterion in ("in_character", "entertaining", "fluent", "refusal"):
            judgments += [
                verdict("j1", 3, criterion, 1 if criterion != "refusal" else 0),
                verdict("j2", 3, criterion, 1 if criterion != "refusal" else 0),
            ]
        return judgments

    def scored(judgments: list[JudgmentRecord]) -> dict[str, float | None]:
        return {s.metric: s.value for s in episode_scores(judgments, panel="p", player="m")}

    calm = scored(judged(0))  # panel mean per turn, then the mean over turns
    assert (calm["in_character"], calm["entertaining"], calm["fluent"]) == ((4 + 1) / 2, (2 + 1) / 2, (4 + 1) / 2)
    assert calm["final"] == (2.5 + 1.5 + 2.5) / 3 and calm["refusal"] == 0.0
    # j1 flags turn 1 (the authors' "any judge"): the conversation is refused and j2 alone scores it
    flagged = scored(judged(1))
    assert flagged["refusal"] == 1.0
    assert (flagged["in_character"], flagged["entertaining"], flagged["fluent"]) == ((3 + 1) / 2, (2 + 1) / 2, 2.5)
    assert flagged["final"] == (2.0 + 1.5 + 2.5) / 3
    everyone = scored([*judged(1), verdict("j2", 3, "refusal", 1)])  # no judge left to score it
    assert everyone["refusal"] == 1.0 and everyone["final"] is None


AUTHORS_SETTINGS = REPO.parent / "shared" / "datasets" / "peers" / "pingpong" / "settings_v2.json"


def test_the_shipped_situations_have_the_papers_lengths() -> None:
    """The authors' settings: per language, seven situations of 4 turns and one of 8 (read from their
    published settings_v2.json where ../shared is beside this clone)."""
    published = [[4] * 7 + [8]]
    if AUTHORS_SETTINGS.is_file():
        settings = json.loads(AUTHORS_SETTINGS.read_text(encoding="utf-8"))
        published = [sorted(int(s["num_turns"]) for s in lang["situations"]) for lang in settings.values()]
    family = PingPongFamily.load(REPO / "scenarios" / "pingpong", REPO / "judges")
    for language in ("en", "de"):
        turns = sorted(s.turns for s in family.situations if s.language == language)
        assert all(turns == lengths for lengths in published), (language, turns, published)


def _only(folder: Path, file: str, table: str, keep: str) -> None:
    """Leave one `[[table]]` entry (by id) in a copied data file."""
    head, *entries = (folder / file).read_text(encoding="utf-8").split(f"[[{table}]]")
    (folder / file).write_text(head + "".join(f"[[{table}]]{e}" for e in entries if f'id = "{keep}"' in e))


def test_a_conversation_that_outgrows_the_context_ends_and_is_judged_on_the_turns_that_fit(tmp_path: Path) -> None:
    """An 8-turn situation can outgrow a small model's context: the episode keeps the turns that fitted,
    says where it ended, and the report counts it; a conversation whose first turn does not fit fails."""
    folder = tmp_path / "pingpong"
    shutil.copytree(REPO / "scenarios" / "pingpong", folder)
    (folder / "judging.toml").write_text('mode = "turn"\n')
    _only(folder, "situations.toml", "situation", "en-story")
    _only(folder, "cards.toml", "card", "en-lighthouse-keeper")

    def factory(context: int) -> Callable[..., ScriptedBackend]:
        def open_backend(catalog: object, spec: object, *, parallel: int) -> ScriptedBackend:
            def respond(request: GenerationRequest) -> str:
                return _responder(request) if request.grammar or role_of(request) != "player" else "y" * 3000

            name = spec.name  # type: ignore[attr-defined]
            return ScriptedBackend(name, respond, context_chars=context if name == "smollm2-135m" else None)

        return open_backend

    catalog = load_catalog(REPO / "models.toml")
    config = RunConfig(
        scenarios=[f"pingpong:{folder}"],
        players=["smollm2-135m"],
        interrogator="smollm2-135m",
        panel=Panel(name="default", judges=["gemma3-270m"]),
        seed=5,
        limit=1,
        models_file=str(catalog.source),
    )  # fmt: skip  (the judge's context is unbounded: only the conversation outgrows one)
    with Store.open(tmp_path / "db.duckdb") as store:
        family = PingPongFamily.load(folder, REPO / "judges")
        summary = Runner(catalog, store, backend_factory=factory(16_000)).execute(config, [family])
        assert (summary.episodes_finished, summary.episodes_failed) == (1, 0)
        ((metadata,),) = store.query("SELECT metadata FROM episodes")
        ended = json.loads(metadata)["ended_early"]
        played = int(re.match(r"after turn (\d) of 8: prompt of \d+ tokens does not fit", ended)[1])  # type: ignore[index]
        assert 1 <= played < 8
        speakers = [speaker for (speaker,) in store.query("SELECT speaker FROM messages ORDER BY idx")]
        assert speakers.count("player") == speakers.count("interrogator") == played
        assert speakers[-1] == "gm"  # the note saying why the conversation ended
        board = build_leaderboard(RunView(store, summary.run_id, family.name))
        assert board.rows[0].ended_early == 1 and board.rows[0].final is not None
        console = Console(record=True, width=200)
        print_leaderboard(console, board)
        shown = console.export_text()
        assert "Ended early" in shown and "smollm2-135m 1." in shown
        tiny = Runner(catalog, store, backend_factory=factory(100)).execute(config, [family])
        assert tiny.episodes_failed == 1  # not even one turn fits: a failure, not a conversation
        assert tiny.episodes_not_fitting == 1  # ... which the run summary tells apart from a model's failure


@pytest.mark.real_model
def test_on_smollm2_an_eight_turn_conversation_ends_where_its_context_is_full(tmp_path: Path) -> None:
    """The real CLI and model, with SmolLM2's context cut to 640 tokens so that the 8-turn situation
    outgrows it within a few turns (at 2,048 tokens half of its 8-turn conversations did)."""
    from tests.test_cli import cli

    folder = tmp_path / "pingpong"
    shutil.copytree(REPO / "scenarios" / "pingpong", folder)
    _only(folder, "situations.toml", "situation", "en-story")
    _only(folder, "cards.toml", "card", "en-lighthouse-keeper")
    models = tmp_path / "models.toml"
    models.write_text((REPO / "models.toml").read_text().replace("context_length = 2048", "context_length = 640", 1))
    db = tmp_path / "pp.duckdb"
    result = cli(
        "run",
        "--scenario",
        f"pingpong:{folder}",
        "--players",
        "smollm2-135m",
        "--interrogator",
        "smollm2-135m",
        "--panel",
        "smollm2",
        "--models",
        str(models),
        "--db",
        str(db),
        "--seed",
        "3",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    with Store.open(db, read_only=True) as store:
        ((status, metadata),) = store.query("SELECT status, metadata FROM episodes")
        played = store.query("SELECT count(*) FROM messages WHERE speaker = 'player'")[0][0]
    ended = json.loads(metadata)["ended_early"]
    assert status == "finished" and ended.startswith(f"after turn {played} of 8") and 1 <= played < 8, ended
    assert "Ended early" in result.stdout


def test_interrogator_message_cleaning() -> None:
    assert clean_interrogator_message('  "Hello there"  ') == "Hello there"
    assert clean_interrogator_message("User: what now?") == "what now?"
    assert clean_interrogator_message("   ") == "..."


def test_resume_plays_only_the_missing_episodes(tmp_path: Path) -> None:
    store, _, run_id = _run(tmp_path)
    complete = store.query("SELECT count(*) FROM messages")[0][0]
    lost = store.query("SELECT episode_id FROM episodes ORDER BY episode_id LIMIT 1")[0][0]
    forget_episode(store, run_id, lost)  # as if the run had been interrupted before this episode was written
    store.finish_run(run_id, "interrupted", 0.0)
    catalog = load_catalog(REPO / "models.toml")
    played: list[str] = []

    factory = scripted_factory(lambda model, request: _responder(request))
    summary = Runner(catalog, store, backend_factory=factory).resume(
        run_id, on_episode=lambda record: played.append(record.episode_id)
    )
    assert played == [lost]
    assert (summary.episodes_skipped, summary.episodes_finished) == (5, 1)
    assert store.query("SELECT count(*) FROM messages")[0][0] == complete
    assert store.query("SELECT status FROM runs")[0][0] == "finished"
    store.close()


def test_resume_refuses_a_family_whose_files_changed_and_plays_on_once_they_are_restored(tmp_path: Path) -> None:
    """A resumed episode must be the run's: a card edited since the run started is named in one line,
    nothing is played or stored; with the file as it was, the run resumes to its end."""
    folder = tmp_path / "cards"
    shutil.copytree(REPO / "scenarios" / "pingpong", folder)
    spec = f"pingpong:{folder}"
    catalog = load_catalog(REPO / "models.toml")
    factory = scripted_factory(lambda model, request: _responder(request))
    config = RunConfig(
        scenarios=[spec],
        players=["smollm2-135m"],
        interrogator="smollm2-135m",
        panel=Panel(name="default", judges=["smollm2-135m"]),
        seed=5,
        limit=2,
        models_file=str(catalog.source),
    )
    with Store.open(tmp_path / "db.duckdb") as store:
        run_id = (
            Runner(catalog, store, backend_factory=factory)
            .execute(config, [load_family(spec, seed=5, store=store)])
            .run_id
        )
        lost = store.query("SELECT episode_id FROM episodes ORDER BY episode_id LIMIT 1")[0][0]
        forget_episode(store, run_id, lost)
        store.finish_run(run_id, "interrupted", 0.0)
        cards = folder / "cards.toml"
        original = cards.read_text(encoding="utf-8")
        cards.write_text(original + "\n# edited after the run started\n", encoding="utf-8")
        with pytest.raises(ApplianceError, match=rf"--resume {run_id}: {re.escape(str(cards))} changed since"):
            Runner(catalog, store, backend_factory=factory).resume(run_id)
        assert store.query("SELECT status FROM runs")[0][0] == "interrupted"
        assert store.query("SELECT count(*) FROM episodes")[0][0] == 1
        cards.write_text(original, encoding="utf-8")
        summary = Runner(catalog, store, backend_factory=factory).resume(run_id)
        assert (summary.episodes_skipped, summary.episodes_finished) == (1, 1)


def test_a_stored_calibration_of_the_panel_is_applied_when_a_run_starts(tmp_path: Path) -> None:
    from appliance.store.labels import write_calibration
    from appliance.store.records import CalibrationRecord

    shift_down = {"xs": [1.0, 5.0], "ys": [0.0, 4.0]}  # judge summary s -> s - 1
    with Store.open(tmp_path / "db.duckdb") as store:
        write_calibration(
            store,
            CalibrationRecord(
                calibration_id="cal-test",
                created_at=datetime(2026, 1, 1),
                panel="default",
                judges=["gemma3-270m", "smollm2-135m"],
                label_set="fed-turn",
                criterion="Overall",
                template="pingpong_likert",
                seed=0,
                fit_items=[],
                heldout_items=[],
                model={
                    "kind": "rating",
                    "maps": {"smollm2-135m": shift_down, "gemma3-270m": shift_down},
                    "weights": {"smollm2-135m": 0.5, "gemma3-270m": 0.5},
                    "human_scale": [0.0, 4.0],
                },
                metrics={},
            ),
        )
    store, _, run_id = _run(tmp_path, judging="turn")  # the label sets hold single turns: per-turn judging
    rows = store.query(
        "SELECT value, calibrated_value, calibration_id FROM scores WHERE run_id = ? AND metric = 'final'", [run_id]
    )
    config = json.loads(store.query("SELECT config FROM runs WHERE run_id = ?", [run_id])[0][0])
    store.close()
    assert len(rows) == 6 and config["calibrations"] == {"pingpong": "cal-test"}
    for value, calibrated, calibration_id in rows:
        assert calibration_id == "cal-test" and abs(calibrated - (value - 1.0)) < 1e-9


def _episode(
    run_id: str,
    player: str,
    index: int,
    reply: str,
    scores: Mapping[str, float | None],
    finished: bool = True,
    language: str | None = None,
) -> EpisodeRecord:
    return hand_episode(
        run_id,
        "pingpong",
        f"card~situation-{index}",
        player,
        scores=scores,
        panel="default",
        metadata={"judging": "conversation", **({"language": language} if language else {})},
        messages=[("interrogator", "hi"), ("player", reply)] * 2,
        error=None if finished else "failed",
    )


def test_length_normalisation_and_refusals_as_the_authors_leaderboard(tmp_path: Path) -> None:
    def judged(final: float, refusal: float = 0.0) -> dict[str, float]:
        return {"in_character": final, "entertaining": final, "fluent": final, "final": final, "refusal": refusal}

    run_id = "hand"
    episodes = [
        _episode(run_id, "terse", 0, "a" * 100, judged(4.0)),
        _episode(run_id, "terse", 1, "a" * 100, judged(3.0)),
        _episode(run_id, "terse", 2, "a" * 100, judged(5.0)),
        _episode(run_id, "terse", 3, "a" * 5000, {}, finished=False),  # unfinished: its length does not count
        _episode(run_id, "wordy", 0, "b" * 300, judged(4.0)),
        _episode(run_id, "wordy", 1, "b" * 300, judged(2.0)),
        # refused: its only judge flagged a turn, so that judge's verdicts were dropped and nothing scores it
        _episode(run_id, "wordy", 2, "b" * 300, {"final": None, "refusal": 1.0}),
    ]
    config = {"scenarios": ["pingpong"], "panel": {"name": "default", "judges": ["j"]}}
    with Store.open(tmp_path / "hand.duckdb") as store:
        store_hand_run(store, run_id, config, episodes)
        board = build_leaderboard(RunView(store, run_id, "pingpong"))
    rows = {row.model: row for row in board.rows}
    # mean reply lengths 100 and 300; their median 200
    assert board.median_of_mean_lengths == 200.0
    assert rows["terse"].mean_length == 100.0 and rows["terse"].length_factor == 1.0  # 1.07 clamped to 1
    assert rows["wordy"].length_factor == pytest.approx(1 + 0.07 * (200 / 300 - 1))
    assert rows["terse"].final == pytest.approx(4.0) and rows["terse"].ln_score == pytest.approx(4.0)
    assert rows["wordy"].final == pytest.approx(3.0)  # (4 + 2) / 2: no judge is left to score the refused one
    assert rows["wordy"].ln_score == pytest.approx(3.0 * (1 + 0.07 * (200 / 300 - 1)))
    assert rows["wordy"].refused_episodes == 1 and rows["wordy"].refusal_ratio == pytest.approx(1 / 3)
    assert rows["terse"].failed_episodes == 1 and board.judging == "conversation"
    # ten times the median length costs 6.3%; no length costs more than 7%
    assert length_factor(2000.0, 200.0) == pytest.approx(1 + 0.07 * (0.1 - 1))
    assert length_factor(1e9, 200.0) >= 0.93
    assert length_factor(None, 200.0) == 1.0


def test_each_language_has_its_own_leaderboard_and_length_median_as_in_the_paper(tmp_path: Path) -> None:
    def judged(final: float) -> dict[str, float]:
        return {"in_character": final, "entertaining": final, "fluent": final, "final": final, "refusal": 0.0}

    played = [  # player, reply, final, language
        ("terse", "a" * 100, 4.0, "en"),
        ("terse", "a" * 100, 2.0, "en"),
        ("wordy", "b" * 300, 3.0, "en"),
        ("terse", "a" * 400, 5.0, "de"),
        ("wordy", "b" * 200, 1.0, "de"),
    ]

    def episodes(run_id: str, languages: set[str]) -> list[EpisodeRecord]:
        return [
            _episode(run_id, player, index, reply, judged(final), language=language)
            for index, (player, reply, final, language) in enumerate(played)
            if language in languages
        ]

    config = {"scenarios": ["pingpong"], "panel": {"name": "default", "judges": ["j"]}}
    with Store.open(tmp_path / "languages.duckdb") as store:
        store_hand_run(store, "both", config, episodes("both", {"en", "de"}))
        board = build_leaderboard(RunView(store, "both", "pingpong"))
        store_hand_run(store, "english", config, episodes("english", {"en"}))
        english_only = build_leaderboard(RunView(store, "english", "pingpong"))
        (page_board,) = collect_contents(store, ["both"], REPO / "judges", max_transcripts=0).boards
    tables = {table.language: table for table in board.by_language}
    assert list(tables) == ["de", "en"] and board.language is None
    en, de = ({row.model: row for row in tables[name].rows} for name in ("en", "de"))
    # English: mean lengths 100 and 300, median 200; German: 400 and 200, median 300
    assert tables["en"].median_of_mean_lengths == 200.0 and tables["de"].median_of_mean_lengths == 300.0
    assert en["terse"].final == pytest.approx(3.0) and en["wordy"].final == pytest.approx(3.0)
    assert en["wordy"].length_factor == pytest.approx(1 + 0.07 * (200 / 300 - 1)) and en["terse"].length_factor == 1
    assert de["terse"].length_factor == pytest.approx(1 + 0.07 * (300 / 400 - 1)) and de["wordy"].length_factor == 1
    assert de["terse"].ln_score == pytest.approx(5.0 * (1 + 0.07 * (300 / 400 - 1)))
    # pooled (ours): terse's replies 4 x 100 and 2 x 400 chars average 200, wordy's 250; median 225
    pooled = {row.model: row for row in board.rows}
    assert board.median_of_mean_lengths == 225.0
    assert pooled["terse"].final == pytest.approx(11 / 3) and pooled["wordy"].final == pytest.approx(2.0)
    assert english_only.language == "en" and english_only.by_language == []
    assert [row.model_dump() for row in english_only.rows] == [row.model_dump() for row in tables["en"].rows]
    # the page shows each language's final apart, as the per-language tables
    final = next(board for board in page_board.metrics if board.metric == "final")
    assert {group: {e.label: e.value for e in rows} for group, rows in final.groups.items()} == {
        "de": {"terse": 5.0, "wordy": 1.0},
        "en": {"terse": 3.0, "wordy": 3.0},
    }
    console = Console(record=True, width=400)
    print_leaderboard(console, board)
    text = console.export_text()
    assert text.index("language 'de' (as the paper reports)") < text.index("language 'en' (as the paper reports)")
    assert "de, en pooled (ours; the paper reports each language apart)" in text


def test_under_a_likelihood_panel_the_length_factor_scales_the_calibrated_score_and_refusals_are_not_measured(
    tmp_path: Path,
) -> None:
    """Raw finals are log-probability differences (negative here): the factor must not scale them, since
    a factor below 1 would raise a negative score. It scales the calibrated final (human scale)."""

    def read(player: str, index: int, reply: str, raw: float, calibrated: float) -> EpisodeRecord:
        episode = hand_episode(
            "lik",
            "pingpong",
            f"card~situation-{index}",
            player,
            scores={"final": raw},
            panel="default",
            metadata={"judging": "likelihood (turn_followups)"},
            messages=[("interrogator", "hi"), ("player", reply)],
        )
        (score,) = episode.scores
        return episode.model_copy(update={"scores": [score.model_copy(update={"calibrated_value": calibrated})]})

    episodes = [
        read("terse", 0, "a" * 100, -0.5, 3.0),
        read("terse", 1, "a" * 100, -0.3, 4.0),
        read("wordy", 0, "b" * 300, -0.2, 4.0),
        read("wordy", 1, "b" * 300, -0.6, 2.0),
    ]
    config = {"scenarios": ["pingpong"], "panel": {"name": "default", "judges": ["j"], "judging": "likelihood"}}
    with Store.open(tmp_path / "lik.duckdb") as store:
        store_hand_run(store, "lik", config, episodes)
        board = build_leaderboard(RunView(store, "lik", "pingpong"))
    rows = {row.model: row for row in board.rows}
    wordy_factor = 1 + 0.07 * (200 / 300 - 1)  # mean lengths 100 and 300, median 200
    assert rows["wordy"].length_factor == pytest.approx(wordy_factor)
    assert rows["wordy"].final == pytest.approx(-0.4)  # the raw mean, unscaled
    assert rows["wordy"].calibrated_final == pytest.approx(3.0)
    assert rows["wordy"].ln_score == pytest.approx(3.0 * wordy_factor)  # not -0.4 x factor (= -0.38, higher)
    assert rows["terse"].ln_score == pytest.approx(3.5)
    assert rows["terse"].refusal_ratio is None and rows["wordy"].refusal_ratio is None
    console = Console(record=True, width=400)
    print_leaderboard(console, board)
    rows_shown = [line for line in console.export_text().splitlines() if line.startswith(("│ terse", "│ wordy"))]
    assert len(rows_shown) == 2 and all("not measured" in line for line in rows_shown)
