"""Golden test: SimulateBench's published answers reproduce its published consistency table and RCoV.

The authors' per-question answers (few-shot prompt 1) are imported through the real CLI into a
DuckDB file; `appliance report --json` must then give the CA table published with SimulateBench
to two decimals, and per-field RCoV equal to the authors' own statistic CSVs.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from tests.test_cli import REPO, assert_clean_error, cli

RESULTS = REPO.parent / "shared" / "datasets" / "peers" / "simulatebench_results" / "db" / "benchmark"
PUBLISHED_CA = {
    "gpt-4": 0.93,
    "gpt-3.5-turbo-16k": 0.74,
    "Qwen-14B-Chat": 0.74,
    "Qwen-7B-Chat": 0.70,
    "vicuna-13b-v1.5-16k": 0.69,
    "chatglm2-6b-32k": 0.68,
    "longchat-7b-32k-v1.5": 0.66,
    "XVERSE-13B-Chat": 0.64,
    "chatglm2-6b": 0.63,
    "vicuna-7b-v1.5-16k": 0.61,
}
#: our perturbed field -> the authors' statistic folder
STATISTIC_FOLDERS = {"birth_year": "age", "education": "education", "surname": "surname"}


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, object]]]:
    if not RESULTS.is_dir():
        pytest.skip(f"{RESULTS} is absent (../shared/datasets is not next to this clone)")
    db = tmp_path_factory.mktemp("golden") / "sb.duckdb"
    result = cli("import", "simulatebench-results", str(RESULTS), "--db", str(db))
    assert result.returncode == 0, result.stderr[-2000:]
    run_id = result.stdout.split(" as run ")[1].split()[0]
    report = cli("report", run_id, "--db", str(db), "--json")
    assert report.returncode == 0, report.stderr[-2000:]
    (consistency,) = json.loads(report.stdout)
    assert consistency["answer_test"] == "authors' containment test"
    return db, {row["model"]: row for row in consistency["rows"]}


def test_published_consistency_table_is_reproduced(imported: tuple[Path, dict[str, dict[str, object]]]) -> None:
    _, rows = imported
    reproduced = {model: round(float(rows[model]["ca"]), 2) for model in PUBLISHED_CA}  # type: ignore[arg-type]
    assert reproduced == PUBLISHED_CA


def test_rcov_per_field_equals_the_authors_statistics(imported: tuple[Path, dict[str, dict[str, object]]]) -> None:
    _, rows = imported
    compared = 0
    for field, folder in STATISTIC_FOLDERS.items():
        with (RESULTS / "statistic" / folder / "few_shot" / "prompt1_answerable_9" / "all.csv").open() as file:
            for published in csv.DictReader(file):
                row = rows.get(published["model"])
                if row is None:
                    continue
                ours = row["rcov_by_field"][field]  # type: ignore[index]
                assert ours == pytest.approx(float(published["CoV"]) * 100, abs=0.005), (field, published["model"])
                compared += 1
    assert compared >= 30


def test_importing_twice_reuses_the_run_and_a_wrong_folder_is_a_clean_error(
    imported: tuple[Path, dict[str, dict[str, object]]], tmp_path: Path
) -> None:
    db, _ = imported
    again = cli("import", "simulatebench-results", str(RESULTS), "--db", str(db))
    assert again.returncode == 0 and again.stdout.startswith("already imported")
    assert_clean_error(cli("import", "simulatebench-results", str(tmp_path), "--db", str(db)), str(tmp_path))


#: the three robustness tables published with SimulateBench (RCoV in percent, integers), in the order of
#: PUBLISHED_CA's models: age (birth year), surname and education variants of Homer
PUBLISHED_RCOV = {
    "birth_year": [1, 3, 1, 2, 3, 4, 13, 1, 4, 2],
    "surname": [2, 5, 1, 2, 4, 3, 9, 2, 5, 4],
    "education": [2, 4, 1, 2, 3, 3, 9, 2, 4, 3],
}


def test_the_thirty_published_rcov_integers_are_the_rcov_rounded_up(
    imported: tuple[Path, dict[str, dict[str, object]]],
) -> None:
    """The authors' tables print each model's per-field RCoV (coefficient of variation of the
    variants' accuracy, in percent) rounded up to an integer: 0.946 shows as 1 and 12.162 as 13."""
    _, rows = imported
    for field, published in PUBLISHED_RCOV.items():
        ours = [float(rows[model]["rcov_by_field"][field]) for model in PUBLISHED_CA]  # type: ignore[index]
        assert [math.ceil(round(value, 9)) for value in ours] == published, (field, [round(v, 2) for v in ours])
        assert [round(value) for value in ours] != published  # nearest rounding would not give the tables
