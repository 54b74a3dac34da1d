"""A store damaged past its headers: every command that reads it answers in one line (exit 2), or correctly.

DuckDB verifies a block when a query first reads it, so damage past the file's headers is found by
whichever query of a command reaches it, long after the file opened. The property: for random
damage (64 random bytes at three places from a third of the file onward, as a bad disk or a torn
write leaves it), each reading command, run by the real CLI in a subprocess, either prints one line
naming `appliance store check` and `appliance store repair` and exits 2, or exits 0 with the answer
it gives on the undamaged store. Never a traceback.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fakes import scripted_pingpong_run
from tests.test_cli import cli

REPO = Path(__file__).resolve().parent.parent
HELPER = REPO / "tests" / "scripted_run.py"
LABELS = 8


def _label_file(path: Path) -> Path:
    """A small turn-level label set: two raters on LABELS replies of different quality."""
    lines = []
    for number in range(LABELS):
        reply = "Sure, here is a clear and kind answer." if number % 2 else "no."
        labels = [
            {"annotator": rater, "criterion": "Overall", "value": 1 + (number * (rater_index + 2)) % 5}
            for rater_index, rater in enumerate(("r1", "r2"))
        ]
        texts = {"context": f"User: question {number}?", "response": reply}
        lines.append(json.dumps({"item_id": f"item-{number}", "texts": texts, "labels": labels}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _checkpoint(db: Path) -> None:
    with duckdb.connect(str(db)) as connection:
        connection.execute("CHECKPOINT")  # everything into the main file, so the damage lands in blocks


@dataclass(frozen=True)
class Stores:
    main: Path
    good: str
    bad: str
    shards: tuple[Path, Path]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    folder = tmp_path_factory.mktemp("whole")
    db = folder / "runs.duckdb"
    good = scripted_pingpong_run(db, "A good answer.", ["smollm2-135m"], limit=2)
    bad = scripted_pingpong_run(db, "A bad answer.", ["smollm2-135m"], limit=2)
    imported = cli("labels", "import", str(_label_file(folder / "tiny.jsonl")), "--format", "jsonl", "--db", str(db))
    assert imported.returncode == 0, imported.stderr
    shards = (folder / "shard-0.duckdb", folder / "shard-1.duckdb")
    for index, shard in enumerate(shards):
        played = subprocess.run(
            [sys.executable, str(HELPER), str(shard), "clembench", "--shard", f"{index + 1}/2", "--run-id", "sharded"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert played.returncode == 0, played.stderr[-2000:]
        _checkpoint(shard)
    _checkpoint(db)
    return Stores(db, good, bad, shards)


@dataclass(frozen=True)
class Command:
    """A command on a copy of the stores in `folder`; `answer` is what must match the undamaged answer."""

    argv: Callable[[Path, Stores], list[str]]
    answer: Callable[[subprocess.CompletedProcess[str], Path], object]


def _stdout(result: subprocess.CompletedProcess[str], folder: Path) -> object:
    return result.stdout.replace(str(folder), "FOLDER")


def _exported(result: subprocess.CompletedProcess[str], folder: Path) -> object:
    return {p.name: p.read_text() for p in sorted((folder / "export").iterdir()) if p.name != "run.json"}


def _page(result: subprocess.CompletedProcess[str], folder: Path) -> object:
    page = (folder / "page.html").read_text()
    return re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?", "TIME", page).count("smollm2-135m")


def _resumed(result: subprocess.CompletedProcess[str], folder: Path) -> object:
    summary = json.loads(result.stdout)["summary"]
    return summary["episodes_skipped"], summary["episodes_finished"]


def _merged(result: subprocess.CompletedProcess[str], folder: Path) -> object:
    return cli("report", "sharded", "--db", str(folder / "merged.duckdb")).stdout


def _calibrated(result: subprocess.CompletedProcess[str], folder: Path) -> object:
    report = json.loads(result.stdout)
    return report["items"], report["panel_calibrated"], report["judges"]


COMMANDS: dict[str, Command] = {
    "report": Command(lambda f, s: ["report", s.good, "--db", str(f / "runs.duckdb")], _stdout),
    "report --json": Command(lambda f, s: ["report", s.bad, "--json", "--db", str(f / "runs.duckdb")], _stdout),
    "view": Command(
        lambda f, s: ["view", s.good, s.bad, "--out", str(f / "page.html"), "--db", str(f / "runs.duckdb")], _page
    ),
    "export": Command(
        lambda f, s: [
            "export",
            s.good,
            "--format",
            "jsonl",
            "--out",
            str(f / "export"),
            "--db",
            str(f / "runs.duckdb"),
        ],
        _exported,
    ),
    "compare": Command(lambda f, s: ["compare", s.good, s.bad, "--db", str(f / "runs.duckdb")], _stdout),
    "labels list": Command(lambda f, s: ["labels", "list", "--db", str(f / "runs.duckdb")], _stdout),
    "run --resume": Command(
        lambda f, s: ["run", "--resume", s.good, "--json", "--db", str(f / "runs.duckdb")], _resumed
    ),
    "merge": Command(
        lambda f, s: ["merge", *(str(f / p.name) for p in s.shards), "--into", str(f / "merged.duckdb")], _merged
    ),
    "score": Command(lambda f, s: ["score", s.bad, "--panel", "smollm2", "--db", str(f / "runs.duckdb")], _stdout),
    "calibrate": Command(
        lambda f, s: [
            *("calibrate", "--panel", "smollm2", "--labels", "tiny", "--criterion", "Overall", "--resamples", "100"),
            *("--plot", str(f / "plot.png"), "--json", "--db", str(f / "runs.duckdb")),
        ],
        _calibrated,
    ),
}


def _copy(stores: Stores, folder: Path) -> None:
    folder.mkdir(parents=True)
    for db in (stores.main, *stores.shards):
        shutil.copy(db, folder / db.name)
        shutil.copytree(db.with_name(db.name + ".journal"), folder / (db.name + ".journal"))


def _damage(db: Path, fractions: list[float], seed: int) -> None:
    """64 random bytes at each fraction of the file's length (taken from its last two thirds)."""
    size = db.stat().st_size
    rng = random.Random(seed)
    with db.open("r+b") as handle:
        for fraction in fractions:
            handle.seek(min(size - 64, int(size * fraction)))
            handle.write(bytes(rng.randrange(256) for _ in range(64)))


@pytest.fixture(scope="module")
def undamaged(stores: Stores, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    answers = {}
    for name, command in COMMANDS.items():
        folder = tmp_path_factory.mktemp("undamaged") / "copy"
        _copy(stores, folder)
        result = cli(*command.argv(folder, stores))
        assert result.returncode == 0, f"{name}: {result.stderr[-2000:]}"
        answers[name] = command.answer(result, folder)
    return answers


def test_the_regression_a_report_of_a_store_damaged_past_its_headers(stores: Stores, tmp_path: Path) -> None:
    """The damage that once gave a traceback (DuckDB's errors moved to the module `_duckdb`)."""
    _copy(stores, tmp_path / "copy")
    db = tmp_path / "copy" / "runs.duckdb"
    _damage(db, [0.4, 0.6, 0.8], seed=1)
    _damage(db, [i / 40 for i in range(14, 40)], seed=2)  # enough that the run's own rows are hit
    result = cli("report", stores.good, "--db", str(db))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
    assert f"appliance store check --db {db}" in lines[0] and f"appliance store repair --db {db}" in lines[0]


@settings(
    max_examples=int(os.environ.get("DAMAGE_EXAMPLES", "4")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    fractions=st.lists(st.floats(min_value=1 / 3, max_value=1.0), min_size=3, max_size=3),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_every_reading_command_answers_a_damaged_store_in_one_line_or_correctly(
    stores: Stores,
    undamaged: dict[str, object],
    tmp_path_factory: pytest.TempPathFactory,
    fractions: list[float],
    seed: int,
) -> None:
    outcomes = {}
    for name, command in COMMANDS.items():
        folder = tmp_path_factory.mktemp("damaged") / "copy"
        _copy(stores, folder)
        for db in (folder / "runs.duckdb", folder / stores.shards[0].name):
            _damage(db, fractions, seed)
        result = cli(*command.argv(folder, stores))
        assert "Traceback" not in result.stderr, f"{name}: {result.stderr[-3000:]}"
        if result.returncode == 0:
            assert command.answer(result, folder) == undamaged[name], f"{name} answered otherwise on the damaged store"
            outcomes[name] = "answered"
            continue
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1, f"{name}: exit {result.returncode}: {result.stderr[-3000:]}"
        assert "appliance store check" in lines[0] and "appliance store repair" in lines[0], f"{name}: {lines[0]}"
        outcomes[name] = "one line"
    print(f"damage at {[round(f, 3) for f in fractions]} (seed {seed}): {outcomes}")
