"""Importers read every published label format in ../shared/datasets and reject malformed files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.errors import ApplianceError
from appliance.labels import read_labels
from appliance.store import Store
from appliance.store.labels import label_set_summaries, load_label_set, write_label_set
from tests.test_cli import assert_clean_error, cli

REPO = Path(__file__).resolve().parent.parent
LABELS = REPO.parent / "shared" / "datasets" / "human_labels"


def shared(relative: str) -> Path:
    path = LABELS / relative
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared/datasets is not next to this clone)")
    return path


def test_fed_gives_turn_and_dialogue_sets_with_na_kept_missing() -> None:
    turn, dialogue = read_labels(shared("fed/fed_data.json"), "fed")
    assert (turn.name, len(turn.items), turn.annotators()) == ("fed-turn", 375, ["a1", "a2", "a3", "a4", "a5"])
    assert (dialogue.name, len(dialogue.items)) == ("fed-dialogue", 125)
    assert turn.scales["Overall"] == (0.0, 4.0) and turn.scales["Understandable"] == (0.0, 1.0)
    first = turn.items[0]
    assert first.texts["context"].startswith("User: Hi!") and first.texts["response"].startswith("System:")
    overall = [x.value for x in turn.labels if x.item_id == first.item_id and x.criterion == "Overall"]
    assert overall == [2.0, 1.0, 3.0, 3.0, 4.0]
    notes = [x for x in dialogue.labels if x.raw_value.startswith("N/A")]
    assert notes and all(x.value is None for x in notes)  # never counted as zero


def test_usr_personachat_items_carry_persona_and_named_annotators() -> None:
    (usr,) = read_labels(shared("usr_personachat/pc_usr_data.json"), "usr")
    assert len(usr.items) == 300
    assert "persona" in usr.items[0].texts and {"shikib", "maxine", "mckenna"} <= set(usr.annotators())
    assert usr.scales["Overall"] == (1.0, 5.0)


def test_dstc9_rows_are_grouped_into_dialogues_by_context() -> None:
    (dstc9,) = read_labels(shared("dstc9_interactive"), "dstc9")
    assert len(dstc9.items) == 2200
    per_item: dict[str, set[str]] = {}
    for label in dstc9.labels:
        per_item.setdefault(label.item_id, set()).add(label.annotator)
    assert {len(annotators) for annotators in per_item.values()} <= {1, 2, 3}
    assert max(len(a) for a in per_item.values()) >= 2
    assert any(x.raw_value == "N/A" and x.value is None for x in dstc9.labels)


def test_pandalm_pairs_map_annotator_codes_to_preferences() -> None:
    (pandalm,) = read_labels(shared("pandalm/testset-v1.json"), "pandalm")
    assert (pandalm.kind, len(pandalm.items)) == ("pairwise", 999)
    assert {x.value for x in pandalm.labels} == {-1.0, 0.0, 1.0}
    first = pandalm.labels[0]
    assert first.raw_value == "2" and first.value == -1.0  # 2 = the second response is better


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return path


def test_generic_jsonl_reads_turn_and_pairwise_items(tmp_path: Path) -> None:
    turn = write_jsonl(
        tmp_path / "mine.jsonl",
        [
            {
                "item_id": "x1",
                "texts": {"context": "User: hi", "response": "Hello!"},
                "labels": [
                    {"annotator": "ann", "criterion": "overall", "value": 4},
                    {"annotator": "bob", "criterion": "overall", "value": "n/a"},
                ],
            }
        ],
    )
    (label_set,) = read_labels(turn, "jsonl")
    assert label_set.name == "mine" and [x.value for x in label_set.labels] == [4.0, None]
    pairs = write_jsonl(
        tmp_path / "pairs.jsonl",
        [
            {
                "item_id": "p1",
                "texts": {"instruction": "Add", "response_a": "2", "response_b": "3"},
                "labels": [{"annotator": "ann", "value": "A"}, {"annotator": "bob", "value": "tie"}],
            }
        ],
    )
    (pair_set,) = read_labels(pairs, "jsonl", kind="pairwise", name="my-pairs")
    assert pair_set.name == "my-pairs" and [x.value for x in pair_set.labels] == [1.0, 0.0]


@pytest.mark.parametrize(
    ("format_name", "content", "fragment"),
    [
        ("fed", "[{]", "not valid JSON"),
        ("fed", '{"context": "x"}', "expected a list of items"),
        ("fed", '[{"context": "x", "response": "y", "annotations": {"Overall": 3}}]', "[0].annotations.Overall"),
        ("usr", '[{"context": "x", "annotators": ["a"]}]', "[0].responses"),
        ("pandalm", '[{"idx": 0, "instruction": "i", "response2": "b", "annotator1": 1}]', "[0].response1"),
        ("dstc9", '[{"coherent": 3}]', "[0].context"),
        ("jsonl", '{"item_id": "a", "texts": {"context": "c"}, "labels": []}', "line 1.texts.response"),
        ("jsonl", '{"item_id": "a", "texts": {"context": "c", "response": "r"}}', "line 1.labels"),
    ],
)
def test_malformed_files_are_one_line_errors_naming_the_field(
    tmp_path: Path, format_name: str, content: str, fragment: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ApplianceError) as caught:
        read_labels(path, format_name)
    message = str(caught.value)
    assert str(path) in message and fragment in message and "\n" not in message


def test_unknown_format_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ApplianceError, match="--format"):
        read_labels(tmp_path, "csv")
    with pytest.raises(ApplianceError, match="file not found"):
        read_labels(tmp_path / "absent.json", "fed")


def test_stored_set_round_trips_and_reimport_replaces_it(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "set.jsonl",
        [
            {
                "item_id": f"i{n}",
                "texts": {"context": "c", "response": f"r{n}"},
                "labels": [{"annotator": "a", "criterion": "q", "value": n}],
            }
            for n in range(3)
        ],
    )
    (label_set,) = read_labels(path, "jsonl")
    with Store.open(tmp_path / "db.duckdb") as store:
        write_label_set(store, label_set, "sha-1")
        write_label_set(store, label_set, "sha-1")
        loaded = load_label_set(store, "set")
        (summary,) = label_set_summaries(store)
    assert [i.item_id for i in loaded.items] == ["i0", "i1", "i2"]
    assert sorted(x.value for x in loaded.labels if x.value is not None) == [0.0, 1.0, 2.0]
    assert (summary["items"], summary["labels"], summary["criteria"]) == (3, 3, {"q": [0.0, 2.0]})


def _jsonl_line(number: int) -> str:
    return json.dumps(
        {
            "item_id": f"item-{number}",
            "texts": {"context": f"User: question {number}", "response": "An answer."},
            "labels": [
                {"annotator": "a", "criterion": "overall", "value": number % 5 + 1},
                {"annotator": "b", "criterion": "overall", "value": "n/a"},
            ],
        }
    )


def test_a_large_jsonl_file_streams_in_and_a_bad_line_keeps_the_earlier_import(tmp_path: Path) -> None:
    """30,000 items go in through many chunks; a bad line near the end rolls every chunk back."""
    db = str(tmp_path / "labels.duckdb")
    good = tmp_path / "big.jsonl"
    good.write_text("\n".join(_jsonl_line(n) for n in range(30_000)) + "\n")
    imported = cli("labels", "import", str(good), "--format", "jsonl", "--name", "big", "--db", db, "--json")
    assert imported.returncode == 0, imported.stderr
    (row,) = json.loads(imported.stdout)
    assert (row["items"], row["labels"], row["missing"], row["annotators"]) == (30_000, 60_000, 30_000, 2)
    bad = tmp_path / "bad.jsonl"
    lines = [_jsonl_line(n) for n in range(30_000)]
    lines[29_000] = '{"item_id": "broken", "texts": {"context": "c", "response": "r"}, "labels": "none"}'
    bad.write_text("\n".join(lines) + "\n")
    refused = cli("labels", "import", str(bad), "--format", "jsonl", "--name", "big", "--db", db)
    assert_clean_error(refused, "bad.jsonl", "line 29001.labels")
    listed = json.loads(cli("labels", "list", "--db", db, "--json").stdout)
    assert [(s["label_set"], s["items"], s["labels"]) for s in listed] == [("big", 30_000, 60_000)]
    assert listed[0]["criteria"] == {"overall": [1.0, 5.0]}
