"""SimulateBench through the real CLI on the embedded SmolLM2, and the not-fitting path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from tests.fakes import one
from tests.test_cli import REPO, cli


@pytest.mark.real_model
def test_simulatebench_run_reports_ca_and_rcov(tmp_path: Path) -> None:
    db = str(tmp_path / "sb.duckdb")
    folder = tmp_path / "one-character"
    folder.mkdir()
    shutil.copy(REPO / "scenarios" / "simulatebench" / "ines-marlow.toml", folder)
    scenario = f"simulatebench:{folder}"
    result = cli("run", "--scenario", scenario, "--players", "smollm2-135m", "--limit", "2", "--db", db, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    (report,) = json.loads(result.stdout)["leaderboards"]
    (row,) = report["rows"]
    assert row["model"] == "smollm2-135m" and row["profiles"] == 2 and row["not_fitting"] == 0
    assert 0.0 <= row["ca"] <= 1.0 and row["characters"] == 1 and row["ca_ci"] is None  # one character
    # SmolLM2 reads the profile (660-830 tokens) and its prompt before the shortest question
    assert row["questions_per_character"] == 13 and 700 < row["profile_tokens"] < 1100
    assert set(row["ca_by_part"]) == {"immutable", "social_role", "relationship"}
    ((field, value),) = row["rcov_by_field"].items()
    assert value is not None and value >= 0.0
    assert {v["field"] for v in row["variants"]} == {"base", field} and {v["character"] for v in row["variants"]} == {
        "ines-marlow"
    }
    with duckdb.connect(db, read_only=True) as con:
        loaded = [name for (name,) in con.execute("SELECT name FROM models").fetchall()]
        assert loaded == ["smollm2-135m"], "a rule-scored family loads no judge"
        questions, answers = one(
            con, "SELECT count(*) FILTER (speaker = 'questioner'), count(*) FILTER (speaker = 'player') FROM messages"
        )
        verdicts = one(con, "SELECT count(*) FROM judgments WHERE mode = 'choice'")[0]
        cached = one(con, "SELECT sum(cached_prompt_tokens) FROM messages")[0]
    assert questions == answers == verdicts > 0
    assert cached > 0, "the profile is prefilled once per episode and forked for every question"
    text = cli("report", "--db", db)
    assert text.returncode == 0 and "RCoV" in text.stdout and "not fitting" in text.stdout
    assert "the paper's characters: about 3,277 tokens" in text.stdout


@pytest.mark.real_model
def test_a_profile_longer_than_the_context_is_reported_not_truncated(tmp_path: Path) -> None:
    models = (REPO / "models.toml").read_text().replace("context_length = 2048", "context_length = 512", 1)
    models_file = tmp_path / "models.toml"
    models_file.write_text(models)
    db = str(tmp_path / "small.duckdb")
    result = cli(
        "run",
        "--scenario",
        "simulatebench",
        "--players",
        "smollm2-135m",
        "--limit",
        "1",
        "--models",
        str(models_file),
        "--db",
        db,
        "--json",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = json.loads(result.stdout)["leaderboards"][0]["rows"]
    assert (row["profiles"], row["not_fitting"], row["ca"]) == (6, 6, None)
    with duckdb.connect(db, read_only=True) as con:
        errors = [r[0] for r in con.execute("SELECT error FROM episodes").fetchall()]
    assert all("does not fit the context of 512 tokens" in error for error in errors)


@pytest.mark.real_model
def test_long_profiles_fit_an_8k_context(tmp_path: Path) -> None:
    """A long profile (over 3,000 tokens) runs with SmolLM2 at the 8,192 tokens it was trained to."""
    models = (REPO / "models.toml").read_text()
    models = models.replace("context_length = 2048\n", "context_length = 8192\n", 1).replace(
        "slots = 32", "slots = 2", 1
    )
    models_file = tmp_path / "models.toml"
    models_file.write_text(models)
    db = str(tmp_path / "long.duckdb")
    folder = tmp_path / "long"
    folder.mkdir()
    shutil.copy(REPO / "scenarios" / "simulatebench" / "long" / "greta-halvorsen.toml", folder)
    scenario = f"simulatebench:{folder}"
    args = ["--scenario", scenario, "--players", "smollm2-135m", "--limit", "1", "--models", str(models_file)]
    result = cli("run", *args, "--db", db, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = json.loads(result.stdout)["leaderboards"][0]["rows"]
    assert (row["profiles"], row["not_fitting"], row["characters"]) == (1, 0, 1)
    assert row["ca"] is not None and 0.0 <= row["ca"] <= 1.0
    with duckdb.connect(db, read_only=True) as con:
        prompt = one(con, "SELECT max(prompt_tokens) FROM messages WHERE speaker = 'player'")[0]
    assert prompt > 3000
