"""Hostile input, generated: every TOML loader, label format and importer either accepts a file or
refuses it with one line naming the file, never a traceback, and a refused import leaves the store
as it was.

Inputs are our own valid files (or a few records of the published ones in ../shared) with keys
deleted, values replaced by values of any type, keys added, or the whole file replaced by random
bytes. The example budget is fixed, so the suite's time is too.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.catalog.models import load_catalog
from appliance.catalog.panels import load_panels
from appliance.compare.gate import Thresholds
from appliance.errors import ApplianceError
from appliance.judging.templates import load_conversation_template, load_judge_template
from appliance.labels import read_labels
from appliance.scenarios import family_names, load_family
from appliance.scenarios.registry import ImportRequest, importers, run_import
from appliance.store import Store
from tests.fakes import REPO, hand_episode, store_hand_run

SHARED = REPO.parent / "shared" / "datasets"
EXAMPLES = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# ---- generating hostile documents -------------------------------------------------------

scalars = (
    st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _places(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path to every value in a tree of dicts and lists."""
    found = [path]
    if isinstance(node, dict):
        for key, child in node.items():
            found += _places(child, (*path, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += _places(child, (*path, index))
    return found


@st.composite
def mutated(draw: st.DrawFn, document: Any) -> Any:
    """`document` with one to three places deleted, replaced by any value, or given a new key."""
    doc = copy.deepcopy(document)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_places(doc)[1:] or [()]))
        if not path:
            return draw(values)
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["delete", "replace", "add"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "replace":
            parent[path[-1]] = draw(values)
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(values)
        else:
            parent.append(draw(values))
    return doc


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))


def dump_toml(document: Any) -> str:
    """Any tree as TOML (inline tables all the way down); a non-table document is written as it is."""
    if not isinstance(document, dict):
        return _toml_value(document)
    return "\n".join(f"{json.dumps(key)} = {_toml_value(value)}" for key, value in document.items()) + "\n"


hostile_toml = st.binary(max_size=200)


def assert_refused_cleanly(path: Path, load: Callable[[], object]) -> None:
    """Either it loads, or an ApplianceError of one line names the file."""
    try:
        load()
    except ApplianceError as error:
        message = str(error)
        assert "\n" not in message.strip(), message
        assert path.name in message or str(path.parent) in message, message


# ---- TOML loaders -----------------------------------------------------------------------

LOADERS: dict[str, tuple[Path, Callable[[Path], object]]] = {
    "models.toml": (REPO / "models.toml", load_catalog),
    "panels.toml": (REPO / "judges" / "panels.toml", load_panels),
    "regression.toml": (REPO / "tests" / "data" / "regression.toml", lambda p: Thresholds.load(p, [])),
    **{
        f"judges/{path.name}": (
            path,
            load_conversation_template if "conversation" in path.name else load_judge_template,
        )
        for path in sorted((REPO / "judges").glob("*.toml"))
        if path.name != "panels.toml"
    },
}


@pytest.mark.parametrize("name", sorted(LOADERS))
@EXAMPLES
@given(data=st.data())
def test_toml_loaders_refuse_hostile_files_in_one_line(name: str, data: st.DataObject, tmp_path: Path) -> None:
    source, load = LOADERS[name]
    path = tmp_path / source.name
    if data.draw(st.booleans()):
        path.write_bytes(data.draw(hostile_toml))
    else:
        path.write_text(dump_toml(data.draw(mutated(tomllib.loads(source.read_text())))), encoding="utf-8")
    assert_refused_cleanly(path, lambda: load(path))


SCENARIO_FILES = sorted(
    (family, path.relative_to(REPO / "scenarios" / family))
    for family in family_names()
    for path in (REPO / "scenarios" / family).rglob("*.toml")
)


@pytest.mark.parametrize(("family", "relative"), SCENARIO_FILES, ids=[f"{f}/{r}" for f, r in SCENARIO_FILES])
@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_scenario_files_refuse_hostile_content_in_one_line(
    family: str, relative: Path, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("scenarios")
    shutil.copytree(REPO / "scenarios" / family, root / family)
    path = root / family / relative
    if data.draw(st.booleans()):
        path.write_bytes(data.draw(hostile_toml))
    else:
        path.write_text(dump_toml(data.draw(mutated(tomllib.loads(path.read_text())))), encoding="utf-8")

    def load() -> None:
        loaded = load_family(family, scenarios_root=root)
        for stage in loaded.stages():
            stage.instances()

    assert_refused_cleanly(path, load)


# ---- human labels -------------------------------------------------------------------------


def _sample(path: Path, records: int = 3) -> Any:
    """A few records of a published file (read from ../shared, never copied into the repository)."""
    if not path.is_file():
        pytest.skip(f"{path} is not here (../shared absent)")
    data = json.loads(path.read_text(encoding="utf-8"))
    return data[:records] if isinstance(data, list) else data


LABEL_SAMPLES: dict[str, Path] = {
    "fed": SHARED / "human_labels" / "fed" / "fed_data.json",
    "usr": SHARED / "human_labels" / "usr_personachat" / "pc_usr_data.json",
    "dstc9": SHARED / "human_labels" / "dstc9_interactive" / "chatbot1.json",
    "pandalm": SHARED / "human_labels" / "pandalm" / "testset-v1.json",
}
JSONL_SAMPLE = [
    {
        "item_id": "q1",
        "texts": {"context": "User: hi", "response": "Hello."},
        "labels": [{"annotator": "a", "criterion": "overall", "value": 4}],
        "metadata": {"system": "x"},
    },
    {
        "item_id": "q2",
        "texts": {"context": "User: bye", "response": "Bye."},
        "labels": [{"annotator": "a", "criterion": "overall", "value": "n/a"}],
    },
]


@pytest.mark.parametrize("label_format", [*sorted(LABEL_SAMPLES), "jsonl"])
@EXAMPLES
@given(data=st.data())
def test_label_files_refuse_hostile_content_in_one_line(label_format: str, data: st.DataObject, tmp_path: Path) -> None:
    path = tmp_path / ("labels.jsonl" if label_format == "jsonl" else "labels.json")
    if data.draw(st.booleans()):
        path.write_bytes(data.draw(st.binary(max_size=300)))
    elif label_format == "jsonl":
        rows = data.draw(mutated(JSONL_SAMPLE))
        lines = rows if isinstance(rows, list) else [rows]
        path.write_text("\n".join(json.dumps(row) for row in lines), encoding="utf-8")
    else:
        path.write_text(json.dumps(data.draw(mutated(_sample(LABEL_SAMPLES[label_format])))), encoding="utf-8")
    assert_refused_cleanly(path, lambda: read_labels(path, label_format, name=None, kind="turn"))


# ---- importers -----------------------------------------------------------------------------


def _snapshot(db: Path) -> str:
    """A digest of every row of every table: equal digests, unchanged store."""
    digest = hashlib.sha256()
    with Store.open(db, read_only=True) as store:
        tables = [str(t) for (t,) in store.query("SELECT table_name FROM information_schema.tables ORDER BY 1")]
        for table in tables:
            rows = sorted(repr(row) for row in store.query(f"SELECT * FROM {table}"))
            digest.update(f"{table}:{rows}".encode())
    return digest.hexdigest()


IMPORT_SAMPLES: dict[str, tuple[str, Path]] = {
    "pingpong-settings": ("settings.json", SHARED / "peers" / "pingpong" / "settings_v2.json"),
    "clembench-instances": ("taboo/instances.json", SHARED / "peers" / "clembench" / "taboo" / "instances.json"),
}


@pytest.mark.parametrize("kind", sorted(importers()))
@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_importers_refuse_hostile_files_and_keep_the_store(
    kind: str, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("import")
    db = folder / "store.duckdb"
    with Store.open(db) as store:  # a store with a run in it already
        episode = hand_episode("kept", "pingpong", "i1", "m", scores={"final": 3.0}, messages=[("player", "hi")])
        store_hand_run(store, "kept", {"scenarios": ["pingpong"]}, [episode])
    before = _snapshot(db)
    file_name, sample = IMPORT_SAMPLES.get(kind, ("input.json", Path()))
    path = folder / file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind in IMPORT_SAMPLES and data.draw(st.booleans()):
        path.write_text(json.dumps(data.draw(mutated(_sample(sample)))), encoding="utf-8")
    else:
        path.write_bytes(data.draw(st.binary(max_size=300)))
    request = ImportRequest(path=path, out=folder / "out", name=None, db=db)
    try:
        run_import(importers()[kind], request)
    except ApplianceError as error:
        assert "\n" not in str(error).strip() and (path.name in str(error) or str(folder) in str(error)), str(error)
        assert _snapshot(db) == before, f"{kind}: a refused import changed the store"
