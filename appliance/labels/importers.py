"""Readers for human-label files: FED, USR-PersonaChat, DSTC9 interactive, PandaLM, generic JSONL.

Each reader checks the structure it relies on and stops at the first
problem with one line naming the file and the field (or line). Values that
are not numbers ("N/A (no errors)") are kept as missing with their raw text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from appliance.errors import ApplianceError, reading
from appliance.labels.model import KINDS, PAIRWISE_CRITERION, HumanLabel, LabelItem, LabelKind, LabelSet
from appliance.util.jsonlines import iter_jsonl_rows

# Declared scales of the published sets (from their papers and data cards).
FED_TURN_SCALES = {"Understandable": (0.0, 1.0), "Overall": (0.0, 4.0)}
FED_DIALOGUE_SCALES = {"Consistent": (0.0, 1.0), "Overall": (0.0, 4.0)}
FED_DEFAULT_SCALE = (0.0, 2.0)
USR_SCALES = {
    "Understandable": (0.0, 1.0),
    "Natural": (1.0, 3.0),
    "Maintains Context": (1.0, 3.0),
    "Engaging": (1.0, 3.0),
    "Uses Knowledge": (0.0, 1.0),
    "Overall": (1.0, 5.0),
}
DSTC9_SCALES = {"consistent": (0.0, 1.0), "human (overall)": (1.0, 5.0)}
DSTC9_DEFAULT_SCALE = (1.0, 3.0)
PANDALM_VALUES = {0: 0.0, 1: 1.0, 2: -1.0}  # 0 tie, 1 first response better, 2 second better
REQUIRED_TEXTS: dict[str, tuple[str, ...]] = {
    "turn": ("context", "response"),
    "dialogue": ("dialogue",),
    "pairwise": ("instruction", "response_a", "response_b"),
}


def _load_json(path: Path) -> Any:
    if not path.is_file():
        raise ApplianceError(f"{path}: file not found")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ApplianceError(f"{path}: not valid JSON: {error}") from None
    except UnicodeDecodeError:
        raise ApplianceError(f"{path}: not a UTF-8 text file") from None


def _expect(condition: bool, path: Path, where: str, problem: str) -> None:
    if not condition:
        raise ApplianceError(f"{path}: field '{where}': {problem}")


def _text(record: dict[str, Any], key: str, path: Path, where: str) -> str:
    value = record.get(key)
    _expect(isinstance(value, str), path, f"{where}.{key}", "missing or not a string")
    return cast(str, value)


def _response_text(record: dict[str, Any], key: str, path: Path, where: str) -> str:
    """A model's response; some published files hold bare JSON scalars (`true`), kept as their text."""
    value = record.get(key)
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | float):
        return json.dumps(value)
    return _text(record, key, path, where)


def human_value(raw: object) -> float | None:
    """A number, or None for anything else (N/A notes, empty strings, null)."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        try:
            return float(raw.strip())
        except ValueError:
            return None
    return None


def _annotation_lists(
    annotations: object, item_id: str, annotators: list[str] | None, path: Path, where: str
) -> list[HumanLabel]:
    _expect(isinstance(annotations, dict) and bool(annotations), path, where, "expected an object of criteria")
    labels: list[HumanLabel] = []
    for criterion, values in cast(dict[str, object], annotations).items():
        _expect(isinstance(values, list), path, f"{where}.{criterion}", "expected a list of annotator values")
        for position, raw in enumerate(cast(list[object], values)):
            annotator = annotators[position] if annotators and position < len(annotators) else f"a{position + 1}"
            labels.append(HumanLabel(item_id, annotator, criterion, human_value(raw), str(raw)))
    return labels


def read_fed(path: Path) -> list[LabelSet]:
    """FED: turn-level items (context + response) and dialogue-level items, five annotators each."""
    data = _load_json(path)
    _expect(isinstance(data, list) and bool(data), path, "(top level)", "expected a list of items")
    source = str(path)
    turn = LabelSet("fed-turn", "turn", "fed", source, [], [], {})
    dialogue = LabelSet("fed-dialogue", "dialogue", "fed", source, [], [], {})
    for index, record in enumerate(data):
        where = f"[{index}]"
        _expect(isinstance(record, dict), path, where, "expected an object")
        context = _text(record, "context", path, where)
        system = str(record.get("system", ""))
        if "response" in record:
            item_id = f"fed-turn-{index}"
            response = _text(record, "response", path, where)
            turn.items.append(LabelItem(item_id, {"context": context, "response": response}, {"system": system}))
            turn.labels.extend(
                _annotation_lists(record.get("annotations"), item_id, None, path, f"{where}.annotations")
            )
        else:
            item_id = f"fed-dialogue-{index}"
            dialogue.items.append(LabelItem(item_id, {"dialogue": context}, {"system": system}))
            dialogue.labels.extend(
                _annotation_lists(record.get("annotations"), item_id, None, path, f"{where}.annotations")
            )
    for label_set, declared in ((turn, FED_TURN_SCALES), (dialogue, FED_DIALOGUE_SCALES)):
        label_set.scales = {c: declared.get(c, FED_DEFAULT_SCALE) for c in label_set.criteria()}
    return [s for s in (turn, dialogue) if s.items]


def read_usr(path: Path) -> list[LabelSet]:
    """USR-PersonaChat: contexts with persona facts, five responses each, named annotators."""
    data = _load_json(path)
    _expect(isinstance(data, list) and bool(data), path, "(top level)", "expected a list of contexts")
    label_set = LabelSet("usr-personachat", "turn", "usr", str(path), [], [], {})
    for index, record in enumerate(data):
        where = f"[{index}]"
        _expect(isinstance(record, dict), path, where, "expected an object")
        context = _text(record, "context", path, where)
        persona = str(record.get("fact", ""))
        annotators = record.get("annotators")
        _expect(isinstance(annotators, list), path, f"{where}.annotators", "expected a list of names")
        responses = record.get("responses")
        _expect(isinstance(responses, list) and bool(responses), path, f"{where}.responses", "expected a list")
        for position, entry in enumerate(cast(list[Any], responses)):
            entry_where = f"{where}.responses[{position}]"
            _expect(isinstance(entry, dict), path, entry_where, "expected an object")
            item_id = f"usr-{index}-{position}"
            texts = {"context": context.strip(), "response": _text(entry, "response", path, entry_where).strip()}
            if persona:
                texts["persona"] = persona.strip()
            label_set.items.append(LabelItem(item_id, texts, {"system": str(entry.get("model", ""))}))
            ratings = {k: v for k, v in entry.items() if k not in ("response", "model")}
            label_set.labels.extend(
                _annotation_lists(ratings, item_id, [str(a) for a in cast(list[Any], annotators)], path, entry_where)
            )
    label_set.scales = {c: USR_SCALES.get(c, (0.0, 1.0)) for c in label_set.criteria()}
    return [label_set]


def read_dstc9(path: Path) -> list[LabelSet]:
    """DSTC9 interactive: one row per rater; rows with the same context are one dialogue."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    _expect(bool(files), path, "(folder)", "no .json files")
    label_set = LabelSet("dstc9-interactive", "dialogue", "dstc9", str(path), [], [], {})
    seen: dict[str, int] = {}
    for file in files:
        data = _load_json(file)
        _expect(isinstance(data, list), file, "(top level)", "expected a list of rows")
        for index, row in enumerate(data):
            where = f"[{index}]"
            _expect(isinstance(row, dict), file, where, "expected an object")
            context = _text(row, "context", file, where)
            item_id = "dstc9-" + hashlib.sha1(context.encode()).hexdigest()[:12]
            if item_id not in seen:
                seen[item_id] = 0
                label_set.items.append(LabelItem(item_id, {"dialogue": context}, {"system": file.stem}))
            seen[item_id] += 1
            annotator = f"r{seen[item_id]}"
            for criterion, raw in row.items():
                if criterion != "context":
                    label_set.labels.append(HumanLabel(item_id, annotator, criterion, human_value(raw), str(raw)))
    label_set.scales = {c: DSTC9_SCALES.get(c, DSTC9_DEFAULT_SCALE) for c in label_set.criteria()}
    return [label_set]


def read_pandalm(path: Path) -> list[LabelSet]:
    """PandaLM test set: an instruction, two responses, three annotators (0 tie, 1, 2)."""
    data = _load_json(path)
    _expect(isinstance(data, list) and bool(data), path, "(top level)", "expected a list of pairs")
    label_set = LabelSet("pandalm", "pairwise", "pandalm", str(path), [], [], {PAIRWISE_CRITERION: (-1.0, 1.0)})
    for index, record in enumerate(data):
        where = f"[{index}]"
        _expect(isinstance(record, dict), path, where, "expected an object")
        item_id = f"pandalm-{record.get('idx', index)}"
        texts = {
            "instruction": _text(record, "instruction", path, where),
            "input": str(record.get("input") or ""),
            "response_a": _response_text(record, "response1", path, where),
            "response_b": _response_text(record, "response2", path, where),
        }
        label_set.items.append(LabelItem(item_id, texts, {"pair": str(record.get("cmp_key", ""))}))
        annotator_keys = sorted(k for k in record if k.startswith("annotator"))
        _expect(bool(annotator_keys), path, f"{where}.annotator1", "no annotator fields")
        for key in annotator_keys:
            raw = record[key]
            value = PANDALM_VALUES.get(raw) if isinstance(raw, int) and not isinstance(raw, bool) else None
            label_set.labels.append(HumanLabel(item_id, key, PAIRWISE_CRITERION, value, str(raw)))
    return [label_set]


PAIRWISE_WORDS = {"a": 1.0, "b": -1.0, "tie": 0.0}


def check_kind(kind: str) -> LabelKind:
    for known in KINDS:
        if kind == known:
            return known
    raise ApplianceError(f"--kind: '{kind}' is not one of {', '.join(KINDS)}")


def iter_jsonl_records(path: Path, kind: LabelKind) -> Iterator[tuple[LabelItem, list[HumanLabel]]]:
    """The generic format (docs/judging.md), one checked item with its labels at a time."""
    seen: set[str] = set()
    for number, record in iter_jsonl_rows(path):
        where = f"line {number}"
        item_id = record.get("item_id")
        _expect(isinstance(item_id, str) and bool(item_id), path, f"{where}.item_id", "missing or empty")
        _expect(item_id not in seen, path, f"{where}.item_id", f"'{item_id}' appears twice")
        seen.add(cast(str, item_id))
        texts = record.get("texts")
        _expect(isinstance(texts, dict), path, f"{where}.texts", "expected an object of strings")
        for key in REQUIRED_TEXTS[kind]:
            _text(cast(dict[str, Any], texts), key, path, f"{where}.texts")
        metadata = record.get("metadata") or {}
        _expect(isinstance(metadata, dict), path, f"{where}.metadata", "expected an object")
        item = LabelItem(
            cast(str, item_id),
            {k: str(v) for k, v in cast(dict[str, Any], texts).items()},
            {k: str(v) for k, v in cast(dict[str, Any], metadata).items()},
        )
        labels = record.get("labels")
        _expect(isinstance(labels, list) and bool(labels), path, f"{where}.labels", "expected a non-empty list")
        found = []
        for position, label in enumerate(cast(list[Any], labels)):
            label_where = f"{where}.labels[{position}]"
            _expect(isinstance(label, dict), path, label_where, "expected an object")
            annotator = _text(label, "annotator", path, label_where)
            criterion = PAIRWISE_CRITERION if kind == "pairwise" else _text(label, "criterion", path, label_where)
            raw = label.get("value")
            value = human_value(raw)
            if kind == "pairwise" and isinstance(raw, str):
                value = PAIRWISE_WORDS.get(raw.strip().lower())
            if kind == "pairwise" and value not in (None, -1.0, 0.0, 1.0):
                raise ApplianceError(f"{path}: field '{label_where}.value': pairwise values are A, B, tie or 1, -1, 0")
            found.append(HumanLabel(item.item_id, annotator, criterion, value, str(raw)))
        yield item, found


def declared_scales(kind: LabelKind) -> dict[str, tuple[float, float]]:
    """Scales the generic format fixes; every other criterion's is its observed range."""
    return {PAIRWISE_CRITERION: (-1.0, 1.0)} if kind == "pairwise" else {}


def read_jsonl(path: Path, name: str | None = None, kind: str = "turn") -> list[LabelSet]:
    """The whole generic-format file as one set in memory (calibration tests, small files)."""
    checked = check_kind(kind)
    label_set = LabelSet(name or path.stem, checked, "jsonl", str(path), [], [], declared_scales(checked))
    for item, labels in iter_jsonl_records(path, checked):
        label_set.items.append(item)
        label_set.labels += labels
    _expect(bool(label_set.items), path, "(file)", "no items")
    return [label_set]


FORMATS: dict[str, Callable[[Path], list[LabelSet]]] = {
    "fed": read_fed,
    "usr": read_usr,
    "dstc9": read_dstc9,
    "pandalm": read_pandalm,
}


def read_labels(path: Path, format_name: str, *, name: str | None = None, kind: str = "turn") -> list[LabelSet]:
    with reading(path):
        return _read_labels(path, format_name, name, kind)


def _read_labels(path: Path, format_name: str, name: str | None, kind: str) -> list[LabelSet]:
    if format_name == "jsonl":
        sets = read_jsonl(path, name, kind)
    elif format_name in FORMATS:
        if not path.exists():
            raise ApplianceError(f"{path}: file not found")
        sets = FORMATS[format_name](path)
        if name is not None and len(sets) == 1:
            sets[0].name = name
    else:
        raise ApplianceError(f"--format: '{format_name}' is not one of {', '.join([*FORMATS, 'jsonl'])}")
    for label_set in sets:
        label_set.fill_scales()
    return sets
