"""DeepEval through the real CLI on the embedded SmolLM2: one episode of every task, the pools and
the payoff tables in the report, and bad settings refused with a one-line error."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import duckdb
import pytest

from tests.test_cli import REPO, assert_clean_error, cli

DATA = REPO / "scenarios" / "deepeval"


def short_settings(folder: Path) -> None:
    """Our data with two seats and short replies, to keep the test quick (the rules are unchanged)."""
    path = folder / "deepeval.toml"
    text = path.read_text(encoding="utf-8")
    for key, value in [
        ("seats", 2),
        ("max_tokens", 48),
        ("reason_max_chars", 40),
        ("max_reviews", 1),
        ("programmer_max_tokens", 128),
        ("reviewer_max_tokens", 48),
    ]:
        text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.MULTILINE)
    path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("APPLIANCE_BWRAP", "no-bwrap-here", "bubblewrap"),
        ("APPLIANCE_SANDBOX_CGROUP", "/appliance-no-such-cgroup", "appliance-no-such-cgroup does not exist"),
    ],
)
def test_code_review_without_kernel_isolation_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str, named: str
) -> None:
    """No bubblewrap, or no cgroup for the run's limits: refused before anything is stored."""
    monkeypatch.setenv(variable, str(tmp_path / value) if variable == "APPLIANCE_BWRAP" else value)
    db = tmp_path / "de.duckdb"
    result = cli("run", "--scenario", "deepeval", "--players", "smollm2-135m", "--panel", "smollm2", "--db", str(db))
    assert_clean_error(result, "deepeval runs model-written code", named, "--unsafe-code-execution")
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)


@pytest.mark.real_model
def test_every_task_plays_one_episode_on_the_embedded_model(tmp_path: Path) -> None:
    folder = tmp_path / "deepeval"
    shutil.copytree(DATA, folder)
    short_settings(folder)
    db = str(tmp_path / "de.duckdb")
    scenario = f"deepeval:{folder}"
    common = ["--players", "smollm2-135m", "--panel", "smollm2", "--db", db]
    result = cli("run", "--scenario", scenario, "--limit", "1", *common, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    run_id = json.loads(result.stdout)["summary"]["run_id"]
    with duckdb.connect(db, read_only=True) as con:
        episodes = con.execute("SELECT instance_id, status, metadata FROM episodes ORDER BY instance_id").fetchall()
        speakers = {s for (s,) in con.execute("SELECT DISTINCT speaker FROM messages WHERE model <> ''").fetchall()}
    tasks = [instance_id.split("/")[0] for instance_id, _, _ in episodes]
    assert sorted(tasks) == sorted(
        ["public_goods_mode1", "public_goods_mode2", "idiom_chain", "word_chain", "code_review", "translation"]
    )
    assert all(status == "finished" for _, status, _ in episodes)
    metadata = {instance_id.split("/")[0]: json.loads(m) for instance_id, _, m in episodes}
    assert all(m["pool"] and m["pool"][0]["round"] == 0 for m in metadata.values())
    goods = metadata["public_goods_mode1"]
    assert len(goods["task_rounds"]) == 5 and all(len(r["amounts"]) == 2 for r in goods["task_rounds"])
    assert all(0 <= amount <= 10 for r in goods["task_rounds"] for amount in r["amounts"])
    tests = metadata["code_review"]["tests"]
    assert tests["total"] >= 3 and 0 <= tests["passed"] <= tests["total"] and tests["status"]
    assert (
        tests["isolation"]["kernel"].startswith("bubblewrap")
        and tests["isolation"]["claimed seccomp"] == "filter installed"
    )
    assert {"Player 1", "Player 2", "Programmer", "Reviewer", "Translator", "Proofreader"} <= speakers

    report = cli("report", run_id, "--db", db, "--json")
    assert report.returncode == 0, report.stderr[-2000:]
    (tables,) = json.loads(report.stdout)
    assert tables["kind"] == "deepeval"
    assert tables["self_judging"] == ["smollm2-135m"]  # the only player judges too: the report says so
    with duckdb.connect(db, read_only=True) as con:
        unparsed = con.execute("SELECT count(*) FROM judgments WHERE panel = 'smollm2' AND NOT parsed").fetchone()
        calls = con.execute(
            "SELECT count(*), count(DISTINCT raw_text), count(DISTINCT target_idx) FROM judgments"
            " GROUP BY episode_id, judge"
        ).fetchall()
    # the referee rated both roles of code review and of translation in one verdict each (llama.cpp took the grammar)
    assert calls == [(2, 1, 2), (2, 1, 2)]
    assert unparsed is not None and tables["unparsed_ratings"] == unparsed[0]
    shown = cli("report", run_id, "--db", db)
    assert "self-judging" in shown.stdout
    symmetric = {row["task"]: row for row in tables["symmetric"]}
    assert set(symmetric) == {"public_goods_mode1", "public_goods_mode2", "idiom_chain", "word_chain"}
    assert all(row["model"] == "smollm2-135m" and row["payoff"]["n"] == 1 for row in symmetric.values())
    coins = symmetric["public_goods_mode1"]["payoff"]["mean"]
    assert 5 * 10 <= coins <= 5 * 10 * 1.2  # self-play, the mean of all seats: from nobody giving to all giving all
    assert symmetric["idiom_chain"]["payoff"]["mean"] == 0.5  # self-play: one seat wins what the other loses
    roles = {(row["task"], row["role"]) for row in tables["asymmetric"]}
    assert {("code_review", "programmer"), ("translation", "translator"), ("translation", "proofreader")} <= roles
    assert [t["repetitions"] for t in tables["repetitions"]] == [1] * 6
    text = cli("report", run_id, "--db", db)
    assert "payoff per model and role" in text.stdout and "repetitions until stable" in text.stdout


def test_bad_deepeval_settings_are_refused_with_the_file_and_field(tmp_path: Path) -> None:
    folder = tmp_path / "deepeval"
    shutil.copytree(DATA, folder)
    settings = folder / "deepeval.toml"
    settings.write_text(settings.read_text(encoding="utf-8").replace("rounds = 5", "rounds = 0"), encoding="utf-8")
    db = tmp_path / "de.duckdb"
    result = cli("run", "--scenario", f"deepeval:{folder}", "--players", "smollm2-135m", "--db", str(db))
    assert_clean_error(result, "deepeval.toml")
    assert "public_goods.rounds" in result.stderr
    if db.exists():  # the store may be created, but nothing is written to it
        with duckdb.connect(str(db), read_only=True) as con:
            assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
