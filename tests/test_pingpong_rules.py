"""PingPong episode logic on a scripted backend: who sees what, and how scores combine."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from appliance.catalog import load_catalog
from appliance.engine.scripted import ScriptedBackend
from appliance.engine.types import GenerationRequest
from appliance.judging.panels import Panel
from appliance.runner import RunConfig, Runner
from appliance.scenarios.pingpong.family import PingPongFamily, clean_interrogator_message, episode_scores
from appliance.store import JudgmentRecord, Store
from tests.fakes import conversation_of, role_of, scripted_factory

REPO = Path(__file__).resolve().parent.parent


def _text(request: GenerationRequest) -> str:
    return "\n".join(message.content for message in request.messages)


def _responder(request: GenerationRequest) -> str:
    if request.grammar is not None:  # a judge
        reply = _text(request).rsplit("Reply to rate", 1)[1]
        score = 5 if "long" in reply else 2
        return json.dumps({"in_character": score, "entertaining": 3, "fluent": 4, "refusal": False})
    system = request.messages[0].content
    if "human user" in system or "menschlichen Nutzer" in system or "человека" in system:
        return '"Tell me something."'
    return "A long answer in character." if len(request.messages) % 4 == 0 else "Short one."


def _run(
    tmp_path: Path, respond: Callable[[GenerationRequest], str] = _responder
) -> tuple[Store, dict[str, ScriptedBackend], str]:
    catalog = load_catalog(REPO / "models.toml")
    family = PingPongFamily.load(REPO / "scenarios" / "pingpong", REPO / "judges")
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
    requests = [r for backend in backends.values() for r in backend.requests if r.grammar is None]
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
    store.close()


def test_every_player_turn_is_judged_by_every_judge_and_stored(tmp_path: Path) -> None:
    store, _, run_id = _run(tmp_path)
    per_episode = store.query(
        "SELECT e.episode_id, count(DISTINCT m.idx) FILTER (WHERE m.speaker = 'player'), "
        "count(DISTINCT j.judge || '/' || j.target_idx) "
        "FROM episodes e JOIN messages m USING (episode_id) JOIN judgments j USING (episode_id) "
        "WHERE e.run_id = ? GROUP BY e.episode_id",
        [run_id],
    )
    assert len(per_episode) == 6
    for _, player_turns, judged in per_episode:
        assert player_turns == 3
        assert judged == 2 * player_turns
    interrogator_texts = store.query("SELECT DISTINCT text FROM messages WHERE speaker = 'interrogator'")
    assert interrogator_texts == [("Tell me something.",)]
    store.close()


def test_unparsed_verdicts_are_stored_and_left_out_of_the_mean(tmp_path: Path) -> None:
    def respond(request: GenerationRequest) -> str:
        if request.grammar is not None and "gemma" in conversation_of(request).rsplit("/", 1)[-1]:
            return '{"in_character": 9'
        return _responder(request)

    store, _, _ = _run(tmp_path, respond)
    unparsed = store.query("SELECT count(*) FROM judgments WHERE NOT parsed AND judge = 'gemma3-270m'")[0][0]
    assert unparsed == 6 * 3 * 4  # episodes x turns x (3 criteria + refusal)
    finals = store.query("SELECT value FROM scores WHERE metric = 'unparsed_verdicts'")
    assert {row[0] for row in finals} == {3.0}
    store.close()


def test_episode_scores_average_judges_then_turns() -> None:
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

    judgments = []
    for criterion, a, b in (("in_character", 5, 3), ("entertaining", 2, 2), ("fluent", 4, 4), ("refusal", 1, 0)):
        judgments += [verdict("j1", 1, criterion, a), verdict("j2", 1, criterion, b)]
    for criterion in ("in_character", "entertaining", "fluent", "refusal"):
        judgments += [
            verdict("j1", 3, criterion, 1 if criterion != "refusal" else 0),
            verdict("j2", 3, criterion, 1 if criterion != "refusal" else 0),
        ]
    scores = {s.metric: s.value for s in episode_scores(judgments, panel="p", player="m")}
    assert scores["in_character"] == (4 + 1) / 2
    assert scores["entertaining"] == (2 + 1) / 2
    assert scores["fluent"] == (4 + 1) / 2
    assert scores["final"] == (2.5 + 1.5 + 2.5) / 3
    assert scores["refusal"] == 1.0  # turn 1: mean vote 0.5 counts as a refusal


def test_interrogator_message_cleaning() -> None:
    assert clean_interrogator_message('  "Hello there"  ') == "Hello there"
    assert clean_interrogator_message("User: what now?") == "what now?"
    assert clean_interrogator_message("   ") == "..."


def test_resume_plays_only_the_missing_episodes(tmp_path: Path) -> None:
    store, _, run_id = _run(tmp_path)
    complete = store.query("SELECT count(*) FROM messages")[0][0]
    lost = store.query("SELECT episode_id FROM episodes ORDER BY episode_id LIMIT 1")[0][0]
    with store.transaction():  # as if the run had been killed before this episode was written
        for table in ("messages", "judgments", "scores", "episodes"):
            store.connection.execute(f"DELETE FROM {table} WHERE episode_id = ?", [lost])
        store.connection.execute("UPDATE runs SET status = 'interrupted'")
    catalog = load_catalog(REPO / "models.toml")
    family = PingPongFamily.load(REPO / "scenarios" / "pingpong", REPO / "judges")
    config = RunConfig(**store.run(run_id)["config"])
    played: list[str] = []

    factory = scripted_factory(lambda model, request: _responder(request))
    summary = Runner(catalog, store, backend_factory=factory).execute(
        config, [family], resume=run_id, on_episode=lambda record: played.append(record.episode_id)
    )
    assert played == [lost]
    assert (summary.episodes_skipped, summary.episodes_finished) == (5, 1)
    assert store.query("SELECT count(*) FROM messages")[0][0] == complete
    assert store.query("SELECT status FROM runs")[0][0] == "finished"
    store.close()


def test_a_stored_calibration_of_the_panel_is_applied_when_a_run_starts(tmp_path: Path) -> None:
    from datetime import datetime

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
    store, _, run_id = _run(tmp_path)
    rows = store.query(
        "SELECT value, calibrated_value, calibration_id FROM scores WHERE run_id = ? AND metric = 'final'", [run_id]
    )
    config = json.loads(store.query("SELECT config FROM runs WHERE run_id = ?", [run_id])[0][0])
    store.close()
    assert len(rows) == 6 and config["calibrations"] == {"pingpong": "cal-test"}
    for value, calibrated, calibration_id in rows:
        assert calibration_id == "cal-test" and abs(calibrated - (value - 1.0)) < 1e-9
