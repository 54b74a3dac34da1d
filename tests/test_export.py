"""`appliance export`: every format reads back with the documented columns and the store's rows."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from appliance.catalog.models import load_catalog
from appliance.catalog.panels import Panel
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import load_family
from appliance.store import Store
from tests.fakes import scripted_factory
from tests.test_cli import assert_clean_error, cli

REPO = Path(__file__).resolve().parent.parent
KEYS = ["run_id", "scenario", "instance_id", "player", "episode_id"]
COLUMNS = {
    "episodes": [
        *KEYS,
        *("player_model", "partner_model", "status", "seed", "started_at", "finished_at", "wall_s", "error"),
        "metadata",
    ],
    "messages": [
        *KEYS,
        *("message_idx", "speaker", "model", "text", "prompt_tokens", "cached_prompt_tokens"),
        *("completion_tokens", "latency_s", "finish_reason"),
    ],
    "judgments": [
        *KEYS,
        *("panel", "judge", "mode", "template", "message_idx", "criterion", "score", "parsed"),
        *("order_swapped", "raw_text"),
    ],
    "scores": [*KEYS, "panel", "scored_model", "metric", "value", "calibrated_value", "calibration_id"],
}
READERS = {"parquet": "read_parquet", "jsonl": "read_json", "csv": "read_csv"}


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A judged PingPong run of two models on the mock model, plus a second run that must not leak in."""
    db = tmp_path_factory.mktemp("export") / "runs.duckdb"
    catalog = load_catalog(REPO / "models.toml")
    config = RunConfig(
        scenarios=["pingpong"],
        players=["smollm2-135m", "gemma3-270m"],
        interrogator="smollm2-135m",
        panel=Panel(name="duo", judges=["smollm2-135m", "gemma3-270m"]),
        limit=2,
        turns=2,
        models_file=str(catalog.source),
    )
    with Store.open(db) as store:
        first = Runner(catalog, store, scripted_factory()).execute(config, [load_family("pingpong")])
        Runner(catalog, store, scripted_factory()).execute(config, [load_family("pingpong")])
    return db, first.run_id


@pytest.mark.parametrize("export_format", ["parquet", "jsonl", "csv"])
def test_each_format_holds_the_runs_rows_under_stable_columns(
    stored_run: tuple[Path, str], tmp_path: Path, export_format: str
) -> None:
    db, run_id = stored_run
    out = tmp_path / "out"
    result = cli("export", run_id, "--format", export_format, "--out", str(out), "--db", str(db), "--json")
    assert result.returncode == 0, result.stderr
    reported = {row["table"]: row["rows"] for row in json.loads(result.stdout)}
    with duckdb.connect(str(db), read_only=True) as con:
        stored = {
            table: con.execute(
                f"SELECT count(*) FROM {table} t JOIN episodes e USING (episode_id) WHERE e.run_id = ?"
                if table != "episodes"
                else "SELECT count(*) FROM episodes WHERE run_id = ?",
                [run_id],
            ).fetchall()[0][0]
            for table in COLUMNS
        }
        texts = [row[0] for row in con.execute(
            "SELECT m.text FROM messages m JOIN episodes e USING (episode_id) WHERE e.run_id = ? "
            "ORDER BY e.episode_id, m.idx",
            [run_id],
        ).fetchall()]  # fmt: skip
        for table, columns in COLUMNS.items():
            path = out / f"{table}.{export_format}"
            relation = con.sql(f"SELECT * FROM {READERS[export_format]}('{path}')")
            assert relation.columns == columns, table
            assert len(relation.fetchall()) == stored[table] == reported[table] > 0, table
            runs = con.sql(f"SELECT DISTINCT run_id FROM {READERS[export_format]}('{path}')").fetchall()
            assert runs == [(run_id,)], "only the chosen run is exported"
        exported = con.sql(f"SELECT text FROM {READERS[export_format]}('{out / f'messages.{export_format}'}')")
        assert [row[0] for row in exported.fetchall()] == texts
    assert json.loads((out / "run.json").read_text())["run_id"] == run_id


def test_bad_export_requests_exit_2_and_leave_the_store_alone(stored_run: tuple[Path, str], tmp_path: Path) -> None:
    db, run_id = stored_run
    before = db.read_bytes()
    assert_clean_error(cli("export", "no-such-run", "--db", str(db)), "no run 'no-such-run'")
    assert_clean_error(cli("export", run_id, "--format", "xlsx", "--db", str(db)), "--format", "xlsx")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert_clean_error(cli("export", run_id, "--out", str(blocker), "--db", str(db)), "a-file", "not a folder")
    assert db.read_bytes() == before
