"""The journal: every write a run makes, appended beside the store before the store commits it.

A SIGKILL can leave a DuckDB file that will not open (a checksum error after a kill during a
checkpoint). The journal is a second copy that a kill cannot spoil: plain append-only files in
`<db>.journal/`, one per run (plus one for instance sets and one for calibrations), one line per
write. Each line is `<sha256 of the JSON> <JSON>`, written with one `write` and `fsync`ed before the
store transaction holding the same write commits. So everything the store ever committed is in a
journal; a kill between the two leaves the journal one transaction's records ahead, which
`--resume` and `appliance store repair` apply; a kill inside an append leaves a torn last line, which fails its
checksum and is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError

#: streams besides the runs'
INSTANCE_SETS = "instance-sets"
CALIBRATIONS = "calibrations"
_RUN_PREFIX = "run-"
_SUFFIX = ".jsonl"


def journal_folder(db: Path) -> Path:
    """Where the journal of store `db` lives: `<db>.journal/` beside it."""
    return db.with_name(db.name + ".journal")


def run_stream(run_id: str) -> str:
    """A run's stream name; ids with characters a file name should not hold are hashed."""
    safe = run_id if re.fullmatch(r"[A-Za-z0-9._-]{1,120}", run_id) else hashlib.sha256(run_id.encode()).hexdigest()
    return _RUN_PREFIX + safe


@dataclass(frozen=True)
class JournalRecord:
    kind: str
    body: dict[str, Any]


@dataclass
class Stream:
    """One journal file as read back: its intact records in order, and the lines that failed."""

    path: Path
    records: list[JournalRecord] = field(default_factory=list)
    #: 1-based numbers of lines whose checksum or JSON failed
    damaged_lines: list[int] = field(default_factory=list)

    @property
    def is_run(self) -> bool:
        return self.path.name.startswith(_RUN_PREFIX)


class Journal:
    """Appends to the journal of one store. Every append is durable when it returns."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def append(self, stream: str, kind: str, body: dict[str, Any]) -> None:
        # keys keep their order: the store keeps JSON as text, and a rebuilt store must hold the same text
        text = json.dumps({"kind": kind, "body": body}, separators=(",", ":"))
        line = f"{hashlib.sha256(text.encode()).hexdigest()} {text}\n".encode()
        path = self.folder / (stream + _SUFFIX)
        try:
            self._write(path, line)
        except OSError as error:  # a full disk, a folder made read-only: the store's write fails with it
            raise ApplianceError(f"{path}: cannot write the store's journal: {error.strerror or error}") from None

    def _write(self, path: Path, line: bytes) -> None:
        created = not path.exists()
        if created:
            self.folder.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if not created and _ends_torn(descriptor):
                line = b"\n" + line  # a killed append left half a line: start ours on a fresh one
            os.write(descriptor, line)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        if created:
            _fsync_folder(self.folder)

    def streams(self) -> list[Stream]:
        if not self.folder.is_dir():
            return []
        return [read_stream(path) for path in sorted(self.folder.glob("*" + _SUFFIX))]

    def stream(self, name: str) -> Stream:
        return read_stream(self.folder / (name + _SUFFIX))


def read_stream(path: Path) -> Stream:
    stream = Stream(path)
    if not path.is_file():
        return stream
    for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        if not raw:
            continue
        digest, _, text = raw.partition(b" ")
        try:
            if hashlib.sha256(text).hexdigest().encode() != digest:
                raise ValueError("checksum")
            payload = json.loads(text)
            stream.records.append(JournalRecord(str(payload["kind"]), dict(payload["body"])))
        except (ValueError, KeyError, TypeError):
            stream.damaged_lines.append(number)
    return stream


def _ends_torn(descriptor: int) -> bool:
    size = os.fstat(descriptor).st_size
    return size > 0 and os.pread(descriptor, 1, size - 1) != b"\n"


def _fsync_folder(folder: Path) -> None:
    """A new file's name is durable only once its folder is synced."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
