"""Label sets, judge verdicts on labelled items, and calibrations in the store.

Importing a set replaces an earlier import of the same name in one
transaction. Cached judge verdicts survive a re-import of an unchanged file
(same sha256); a changed file drops them, since its texts may differ.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from appliance.errors import ApplianceError
from appliance.labels.model import HumanLabel, LabelItem, LabelKind, LabelSet
from appliance.store.journal import CALIBRATIONS
from appliance.store.records import CalibrationRecord, LabelVerdict
from appliance.store.store import Store


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


#: items written per INSERT while streaming a label file
CHUNK = 2000


@dataclass(frozen=True)
class LabelSetHeader:
    name: str
    kind: LabelKind
    format: str
    source: str
    source_sha256: str
    #: scales the format declares; other criteria get their observed range
    scales: dict[str, tuple[float, float]]


@dataclass
class StoredLabelSet:
    """What one import stored, counted while the records streamed past."""

    name: str
    kind: str
    items: int = 0
    labels: int = 0
    missing: int = 0
    annotators: set[str] = field(default_factory=set)
    scales: dict[str, tuple[float, float]] = field(default_factory=dict)
    criteria_seen: set[str] = field(default_factory=set)

    def criteria(self) -> list[str]:
        return sorted(self.criteria_seen)


def write_label_set(store: Store, label_set: LabelSet, source_sha256: str) -> StoredLabelSet:
    """A set read whole (the published formats) stored in one transaction, replacing an earlier import."""
    by_item: dict[str, list[HumanLabel]] = {}
    for label in label_set.labels:
        by_item.setdefault(label.item_id, []).append(label)
    header = LabelSetHeader(
        label_set.name, label_set.kind, label_set.format, label_set.source, source_sha256, dict(label_set.scales)
    )
    return stream_label_set(store, header, ((item, by_item.get(item.item_id, [])) for item in label_set.items))


def stream_label_set(
    store: Store, header: LabelSetHeader, records: Iterable[tuple[LabelItem, list[HumanLabel]]]
) -> StoredLabelSet:
    """Items and labels written in chunks as they are read, all in one transaction.

    Memory stays at a chunk whatever the file's size, and a bad record anywhere (the reader raises)
    rolls the whole import back, so an earlier import of the set is kept as it was.
    """
    stored = StoredLabelSet(header.name, header.kind)
    observed: dict[str, list[float]] = {}
    with store.transaction():
        _forget_previous(store, header)
        items: list[list[Any]] = []
        labels: list[list[Any]] = []
        for item, item_labels in records:
            items.append([header.name, item.item_id, json.dumps(item.texts), json.dumps(item.metadata)])
            for x in item_labels:
                labels.append([header.name, x.item_id, x.annotator, x.criterion, x.value, x.raw_value])
                stored.annotators.add(x.annotator)
                low_high = observed.setdefault(x.criterion, [math.inf, -math.inf])
                if x.value is not None:
                    low_high[0], low_high[1] = min(low_high[0], x.value), max(low_high[1], x.value)
                else:
                    stored.missing += 1
            stored.items += 1
            stored.labels += len(item_labels)
            if len(items) >= CHUNK:
                _flush(store, items, labels)
        _flush(store, items, labels)
        if stored.items == 0:
            raise ApplianceError(f"{header.source}: field '(file)': no items")
        stored.criteria_seen = set(observed)
        stored.scales = dict(header.scales) | {
            criterion: (low, high)
            for criterion, (low, high) in sorted(observed.items())
            if criterion not in header.scales and low <= high
        }
        store.connection.execute(
            "INSERT INTO label_sets VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                header.name,
                header.kind,
                header.format,
                header.source,
                header.source_sha256,
                _now(),
                json.dumps({c: list(r) for c, r in stored.scales.items()}),
            ],
        )
    return stored


def _forget_previous(store: Store, header: LabelSetHeader) -> None:
    """Delete an earlier import of the set; its cached verdicts too when its file changed (the texts may have)."""
    previous = store.query("SELECT source_sha256 FROM label_sets WHERE label_set = ?", [header.name])
    tables = ["label_sets", "label_items", "human_labels"]
    if previous and previous[0][0] != header.source_sha256:
        tables.append("label_judgments")
    for table in tables:
        store.connection.execute(f"DELETE FROM {table} WHERE label_set = ?", [header.name])


def _flush(store: Store, items: list[list[Any]], labels: list[list[Any]]) -> None:
    if items:
        store.insert_rows("INSERT INTO label_items VALUES", items)
    if labels:
        store.insert_rows("INSERT INTO human_labels VALUES", labels)
    items.clear()
    labels.clear()


def label_set_summaries(store: Store) -> list[dict[str, Any]]:
    rows = store.query(
        """
        SELECT s.label_set, s.kind, s.format, s.source, s.imported_at,
               (SELECT count(*) FROM label_items i WHERE i.label_set = s.label_set),
               (SELECT count(DISTINCT annotator) FROM human_labels h WHERE h.label_set = s.label_set),
               (SELECT count(*) FROM human_labels h WHERE h.label_set = s.label_set),
               (SELECT count(*) FROM human_labels h WHERE h.label_set = s.label_set AND h.value IS NULL),
               s.scales
        FROM label_sets s ORDER BY s.label_set
        """
    )
    keys = ("label_set", "kind", "format", "source", "imported_at", "items", "annotators", "labels", "missing")
    summaries = []
    for row in rows:
        summary = dict(zip(keys, row[:-1], strict=True))
        summary["criteria"] = json.loads(row[-1])
        summaries.append(summary)
    return summaries


def load_label_set(store: Store, name: str) -> LabelSet:
    head = store.query("SELECT kind, format, source, scales FROM label_sets WHERE label_set = ?", [name])
    if not head:
        known = [str(row[0]) for row in store.query("SELECT label_set FROM label_sets ORDER BY 1")]
        raise ApplianceError(
            f"--labels: no label set '{name}' in {store.path} (known: {', '.join(known) or 'none; run labels import'})"
        )
    kind, format_name, source, scales = head[0]
    items = [
        LabelItem(str(item_id), json.loads(texts), json.loads(metadata))
        for item_id, texts, metadata in store.query(
            "SELECT item_id, texts, metadata FROM label_items WHERE label_set = ? ORDER BY item_id", [name]
        )
    ]
    labels = [
        HumanLabel(str(item_id), str(annotator), str(criterion), None if value is None else float(value), str(raw))
        for item_id, annotator, criterion, value, raw in store.query(
            "SELECT item_id, annotator, criterion, value, raw_value FROM human_labels WHERE label_set = ?", [name]
        )
    ]
    return LabelSet(
        name,
        cast(LabelKind, kind),
        str(format_name),
        str(source),
        items,
        labels,
        {c: (float(r[0]), float(r[1])) for c, r in json.loads(scales).items()},
    )


def cached_label_verdicts(
    store: Store, label_set: str, template_fingerprint: str, variant: str
) -> dict[tuple[str, str, bool], LabelVerdict]:
    """Stored verdicts keyed by (item, judge, order swapped)."""
    rows = store.query(
        "SELECT item_id, judge, order_swapped, score, raw_text, parsed, features FROM label_judgments "
        "WHERE label_set = ? AND template_fingerprint = ? AND variant = ?",
        [label_set, template_fingerprint, variant],
    )
    return {
        (str(item), str(judge), bool(swapped)): LabelVerdict(
            item_id=str(item),
            judge=str(judge),
            variant=variant,
            order_swapped=bool(swapped),
            score=None if score is None else float(score),
            raw_text=str(raw),
            parsed=bool(parsed),
            features=json.loads(features) if features else {},
        )
        for item, judge, swapped, score, raw, parsed, features in rows
    }


def write_label_verdicts(
    store: Store, label_set: str, template: str, template_fingerprint: str, verdicts: list[LabelVerdict]
) -> None:
    if not verdicts:
        return
    with store.transaction():
        store.connection.executemany(
            "INSERT OR REPLACE INTO label_judgments VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                [
                    label_set,
                    v.item_id,
                    v.judge,
                    template,
                    template_fingerprint,
                    v.variant,
                    v.order_swapped,
                    v.score,
                    v.raw_text,
                    v.parsed,
                    _now(),
                    json.dumps(v.features) if v.features else None,
                ]
                for v in verdicts
            ],
        )


def write_calibration(store: Store, record: CalibrationRecord) -> None:
    store.journal_append(CALIBRATIONS, "calibration", record.model_dump(mode="json"))
    store.connection.execute(
        "INSERT INTO calibrations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            record.calibration_id,
            record.created_at,
            record.panel,
            json.dumps(record.judges),
            record.label_set,
            record.criterion,
            record.template,
            record.seed,
            json.dumps(record.fit_items),
            json.dumps(record.heldout_items),
            json.dumps(record.model),
            json.dumps(record.metrics),
        ],
    )


_CALIBRATION_COLUMNS = (
    "calibration_id, created_at, panel, judges, label_set, criterion, template, seed, fit_items, heldout_items, "
    "model, metrics"
)


def _calibration(row: tuple[Any, ...]) -> CalibrationRecord:
    keys = [key.strip() for key in _CALIBRATION_COLUMNS.split(",")]
    record = dict(zip(keys, row, strict=True))
    for key in ("judges", "fit_items", "heldout_items", "model", "metrics"):
        record[key] = json.loads(record[key])
    return CalibrationRecord(**record)


def newest_calibrations(store: Store, panel: str, template: str, judges: list[str]) -> list[CalibrationRecord]:
    """The calibrations of this panel (same judges) for verdicts of `template`, newest first."""
    rows = store.query(
        f"SELECT {_CALIBRATION_COLUMNS} FROM calibrations WHERE panel = ? AND template = ? ORDER BY created_at DESC",
        [panel, template],
    )
    records = [_calibration(row) for row in rows]
    return [record for record in records if sorted(record.judges) == sorted(judges)]


def store_if_missing(store: Store, record: CalibrationRecord) -> None:
    """Keep a calibration in the store (a shipped one, so that runs can name it by id)."""
    if not store.query("SELECT 1 FROM calibrations WHERE calibration_id = ?", [record.calibration_id]):
        write_calibration(store, record)


def calibration_rows(store: Store) -> list[tuple[Any, ...]]:
    """Every stored calibration, oldest first: id, created_at, panel, label set, criterion, template,
    model JSON and metrics JSON."""
    return store.query(
        "SELECT calibration_id, created_at, panel, label_set, criterion, template, model, metrics "
        "FROM calibrations ORDER BY created_at"
    )


def find_calibration_record(store: Store, calibration_id: str) -> CalibrationRecord | None:
    rows = store.query(f"SELECT {_CALIBRATION_COLUMNS} FROM calibrations WHERE calibration_id = ?", [calibration_id])
    return _calibration(rows[0]) if rows else None


def get_calibration(store: Store, calibration_id: str) -> CalibrationRecord:
    record = find_calibration_record(store, calibration_id)
    if record is None:
        raise ApplianceError(f"{store.path}: no calibration '{calibration_id}'")
    return record
