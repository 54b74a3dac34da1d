from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from appliance.errors import ApplianceError
from appliance.store import EpisodeRecord, MessageRecord, ModelRecord, RunRecord, ScoreRecord, Store
from appliance.store.schema import LATEST_VERSION, MIGRATIONS


def _run(run_id: str = "r1") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        started_at=datetime(2026, 1, 1),
        seed=1,
        config={"k": 1},
        versions={"python": "3"},
        git_revision=None,
        file_hashes={},
    )


def _episode(episode_id: str, run_id: str = "r1", text: str = "hello") -> EpisodeRecord:
    return EpisodeRecord(
        episode_id=episode_id,
        run_id=run_id,
        scenario="pingpong",
        instance_id="i",
        player="m",
        status="finished",
        seed=3,
        started_at=datetime(2026, 1, 1),
        finished_at=datetime(2026, 1, 1),
        wall_s=1.0,
        messages=[
            MessageRecord(
                idx=0,
                speaker="player",
                model="m",
                text=text,
                prompt_tokens=5,
                cached_prompt_tokens=2,
                completion_tokens=3,
                latency_s=0.1,
                finish_reason="stop",
            )
        ],
        scores=[ScoreRecord(panel="p", player="m", metric="final", value=3.5)],
    )


def test_new_database_is_migrated_and_reopens(tmp_path: Path) -> None:
    path = tmp_path / "a.duckdb"
    with Store.open(path) as store:
        assert store.schema_version() == LATEST_VERSION
        store.create_run(_run(), [ModelRecord(name="m", backend="llama_cpp", path="/x", sha256="0", parameters={})])
        store.write_episode(_episode("r1:e1"))
    with Store.open(path, read_only=True) as store:
        assert store.finished_episode_ids("r1") == {"r1:e1"}
        assert store.query("SELECT text, cached_prompt_tokens FROM messages") == [("hello", 2)]


def test_a_version_4_database_keeps_its_scores_and_then_scores_several_players_per_episode(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    connection = duckdb.connect(str(path))
    connection.execute(
        "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, description VARCHAR, applied_at TIMESTAMP)"
    )
    for version, description, ddl in MIGRATIONS[:4]:
        connection.execute(ddl)
        connection.execute("INSERT INTO schema_version VALUES (?, ?, now())", [version, description])
    connection.execute("INSERT INTO scores VALUES ('r1:old', 'r1', 'p', 'm', 'final', 2.0, NULL, 'c1')")
    connection.close()
    episode = _episode("r1:e1")
    episode.scores = [
        ScoreRecord(panel="rules", player=model, metric="payoff", value=v) for model, v in (("a", 1), ("b", 0))
    ]
    with Store.open(path) as store:
        assert store.schema_version() == LATEST_VERSION
        store.create_run(_run(), [])
        store.write_episode(episode)
        rows = store.query("SELECT episode_id, player, metric, value, calibration_id FROM scores ORDER BY ALL")
    assert rows == [
        ("r1:e1", "a", "payoff", 1.0, None),
        ("r1:e1", "b", "payoff", 0.0, None),
        ("r1:old", "m", "final", 2.0, "c1"),
    ]


def test_rewriting_an_episode_replaces_it_whole(tmp_path: Path) -> None:
    with Store.open(tmp_path / "a.duckdb") as store:
        store.create_run(_run(), [])
        store.write_episode(_episode("r1:e1", text="first"))
        store.write_episode(_episode("r1:e1", text="second"))
        assert store.query("SELECT text FROM messages") == [("second",)]
        assert store.query("SELECT count(*) FROM scores") == [(1,)]


def test_failed_write_leaves_earlier_episodes_intact(tmp_path: Path) -> None:
    with Store.open(tmp_path / "a.duckdb") as store:
        store.create_run(_run(), [])
        store.write_episode(_episode("r1:e1"))
        broken = _episode("r1:e2")
        broken.messages.append(broken.messages[0])  # duplicate (episode_id, idx) violates the primary key
        with pytest.raises(Exception, match=r"(?i)constraint|duplicate"):
            store.write_episode(broken)
        assert store.finished_episode_ids("r1") == {"r1:e1"}
        assert store.query("SELECT count(*) FROM messages") == [(1,)]


def test_database_in_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ApplianceError, match="does not exist"):
        Store.open(blocker / "db.duckdb")


def test_read_only_open_of_missing_database_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ApplianceError, match="database not found"):
        Store.open(tmp_path / "none.duckdb", read_only=True)
