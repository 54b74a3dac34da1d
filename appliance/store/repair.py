"""`appliance store check` and `appliance store repair`: the store measured against its journal.

A journal replayed through the store's own write methods gives the rows the store must hold, so the
check compares rows, and the repair is the same replay into a fresh file. What no journal holds
(runs from before journals, label sets, cached label verdicts, benches) is copied from the damaged
file where DuckDB can still read it, and named where it cannot.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError, first_line
from appliance.store.database import duckdb
from appliance.store.instance_sets import write_instance_set
from appliance.store.journal import Journal, JournalRecord, Stream, journal_folder, run_stream
from appliance.store.labels import store_if_missing
from appliance.store.records import (
    CalibrationRecord,
    EpisodeRecord,
    JudgmentRecord,
    ModelRecord,
    RunRecord,
    ScoreRecord,
)
from appliance.store.schema import LATEST_VERSION
from appliance.store.store import Store, repair_hint

#: a run's rows, table by table; `{db}` is the database's prefix ("" or "damaged.")
_RUN_ROWS = {
    "runs": "SELECT * FROM {db}runs WHERE run_id = ?",
    "models": "SELECT * FROM {db}models WHERE run_id = ?",
    "episodes": "SELECT * FROM {db}episodes WHERE run_id = ?",
    "messages": "SELECT * FROM {db}messages WHERE episode_id IN (SELECT episode_id FROM {db}episodes WHERE run_id = ?)",
    "judgments": (
        "SELECT * FROM {db}judgments WHERE episode_id IN (SELECT episode_id FROM {db}episodes WHERE run_id = ?)"
    ),
    "scores": "SELECT * FROM {db}scores WHERE run_id = ?",
}
#: a run's rows out of the store: the same selections, last table first (the rows that name its
#: episodes go before the episodes)
_DELETE_RUN = tuple(select.format(db="").replace("SELECT *", "DELETE", 1) for select in reversed(_RUN_ROWS.values()))
#: tables copied whole from a damaged file (instance sets and calibrations are journaled too)
_WHOLE_TABLES = (
    "label_sets",
    "label_items",
    "human_labels",
    "label_judgments",
    "bench",
    "instance_sets",
    "calibrations",
)


def replay(records: list[JournalRecord], store: Store) -> None:
    """Apply journal records through the store's own writes, in the order they were made (a run's
    records name their run once, in the first)."""
    run_id = ""
    for record in records:
        body = record.body
        if record.kind == "run":
            run = RunRecord(**body["run"])
            run_id = run.run_id
            if not store.has_run(run_id):
                store.create_run(run, [ModelRecord(**model) for model in body["models"]])
        elif record.kind == "episode":
            store.write_episodes([EpisodeRecord(**body)])
        elif record.kind == "planned":
            store.set_planned(run_id, int(body["episodes"]))
        elif record.kind == "finish":
            finished_at = datetime.fromisoformat(body["finished_at"])
            store.finish_run(run_id, str(body["status"]), float(body["wall_s"]), finished_at)
        elif record.kind == "verdicts":
            store.replace_panel_verdicts(
                str(body["episode_id"]),
                run_id,
                str(body["panel"]),
                [JudgmentRecord(**j) for j in body["judgments"]],
                [ScoreRecord(**s) for s in body["scores"]],
            )
        elif record.kind == "instance_set":
            fields = {key: body[key] for key in ("name", "family", "source", "seed", "count", "payload")}
            write_instance_set(store, **fields, created_at=datetime.fromisoformat(body["created_at"]))
        elif record.kind == "calibration":
            store_if_missing(store, CalibrationRecord(**body))
        else:
            raise ApplianceError(f"{store.path}: journal record of unknown kind '{record.kind}'")


def journaled_run_id(stream: Stream) -> str | None:
    """The run a run stream rebuilds: named by its first record (None when that line is damaged)."""
    first = stream.records[0] if stream.records else None
    return str(first.body["run"]["run_id"]) if first is not None and first.kind == "run" else None


def recover_run(store: Store, run_id: str) -> bool:
    """Before a resume: where the store lacks what the run's journal holds (a kill between the
    journal's fsync and the store's commit: an episode, a planning step, the run's finish, or the run
    itself), the run's rows are rebuilt from the journal. True when they were. A journal that does not
    start with the run (a run begun before journals existed) is left alone."""
    if store.journal is None:
        return False
    stream = store.journal.stream(run_stream(run_id))
    if journaled_run_id(stream) != run_id:
        return False
    if store.has_run(run_id) and check_run(run_id, stream, store).ok:
        return False
    _rebuild_run(store, run_id, stream)
    return True


def _rebuild_run(store: Store, run_id: str, stream: Stream) -> None:
    with _unjournaled(store), store.transaction():
        for delete in _DELETE_RUN:
            store.connection.execute(delete, [run_id])
        replay(stream.records, store)


@dataclass
class Reconciliation:
    """A run's stored rows measured against its journal as the run (or a resume, merge or rescoring) ends."""

    run_id: str
    #: journaled episodes the store lacked, and restored from the journal
    restored: list[str] = field(default_factory=list)
    #: anything else that differed and was rebuilt (episodes differing or not journaled, the run's row)
    rebuilt: list[str] = field(default_factory=list)
    #: what still differs after the rebuild (the store needs 'appliance store repair'); None when whole
    unrepaired: str | None = None

    def line(self) -> str | None:
        """One line for the terminal, or None when the store held what the journal does."""
        if self.unrepaired is not None:
            return f"{self.unrepaired}; the store does not hold what the run journaled (run 'appliance store repair')"
        if not (self.restored or self.rebuilt):
            return None
        missing = f"{len(self.restored)} journaled episodes missing from the store ({_first(self.restored)})"
        what = ([missing] if self.restored else []) + self.rebuilt
        return f"run {self.run_id}: {'; '.join(what)}: restored from its journal"


def reconcile_run(store: Store, run_id: str) -> Reconciliation:
    """Compare the run's stored rows with its journal; rebuild the run from the journal where they differ and
    check again. A run never reports what the store does not hold: the caller prints `line()` and fails
    where `unrepaired` is set. Costs a replay of the run's journal into memory (about a second per thousand
    episodes here)."""
    result = Reconciliation(run_id)
    if store.journal is None:
        return result
    stream = store.journal.stream(run_stream(run_id))
    if journaled_run_id(stream) != run_id:
        return result
    check = check_run(run_id, stream, store)
    if check.ok:
        return result
    result.restored = check.missing
    if check.differing:
        result.rebuilt.append(f"{len(check.differing)} episodes differing from the journal")
    if check.extra:
        result.rebuilt.append(f"{len(check.extra)} stored episodes not in the journal")
    if check.run_row_differs:
        result.rebuilt.append("the run's own row or models")
    _rebuild_run(store, run_id, stream)
    again = check_run(run_id, stream, store)  # read back from the file, which the rebuild's connection closed
    if not again.ok:
        result.unrepaired = again.describe()
    return result


def _first(episode_ids: list[str]) -> str:
    return episode_ids[0] + (f" and {len(episode_ids) - 1} more" if len(episode_ids) > 1 else "")


@dataclass
class RunCheck:
    run_id: str
    journal_episodes: int
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    differing: list[str] = field(default_factory=list)
    run_row_differs: bool = False
    damaged_lines: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The store holds what the journal does. Damaged lines alone do not fail it: a kill inside an
        append leaves one, and a record it lost would show as a difference."""
        return not (self.missing or self.extra or self.differing or self.run_row_differs)

    def describe(self) -> str:
        skipped = f" ({len(self.damaged_lines)} torn or damaged journal lines skipped)" if self.damaged_lines else ""
        if self.ok:
            return f"run {self.run_id}: {self.journal_episodes} episodes, as journaled{skipped}"
        found = []
        if self.missing:
            found.append(f"{len(self.missing)} journaled episodes missing from the store")
        if self.differing:
            found.append(f"{len(self.differing)} episodes differ from the journal")
        if self.extra:
            found.append(f"{len(self.extra)} stored episodes not in the journal")
        if self.run_row_differs:
            found.append("the run's own row or models differ")
        return f"run {self.run_id}: " + "; ".join(found) + skipped


@dataclass
class CheckReport:
    runs: list[RunCheck]
    #: stored runs no journal holds (made before journals existed)
    unjournaled_runs: list[str]
    #: instance sets and calibrations journaled but not stored, and damaged lines of their streams
    other_problems: list[str]

    @property
    def ok(self) -> bool:
        return all(run.ok for run in self.runs) and not self.other_problems


def check_store(db: Path, runs_only: Sequence[str] | None = None) -> CheckReport:
    """Compare every journaled run, instance set and calibration with the store, row by row; with
    `runs_only`, just those runs (replaying every journal grows with the store: a harness that checks
    after each round of runs checks that round's)."""
    journal = Journal(journal_folder(db))
    if runs_only is None:
        streams = journal.streams()
    else:
        streams = [journal.stream(run_stream(run_id)) for run_id in runs_only]
        if missing := [run_id for run_id, stream in zip(runs_only, streams, strict=True) if not stream.records]:
            raise ApplianceError(f"--run: {db} has no journal of run {', '.join(missing)}")
    with Store.open(db, read_only=True) as stored:
        try:
            with stored.transaction():  # one state of the store throughout
                _read_everything(stored)
                runs = []
                other: list[str] = []
                for stream in streams:
                    if not stream.is_run:
                        other += _check_other(stream, stored)
                        continue
                    run_id = journaled_run_id(stream)
                    if run_id is None:  # nothing intact: a kill tore the run's first append, nothing was stored
                        if stream.records:
                            other.append(f"{stream.path.name}: the run's first record is damaged")
                        continue
                    runs.append(check_run(run_id, stream, stored))
                journaled = {run.run_id for run in runs}
                stored_runs = stored.query("SELECT run_id FROM runs ORDER BY 1") if runs_only is None else []
                unjournaled = [str(r) for (r,) in stored_runs if r not in journaled]
        except duckdb.Error as error:  # a block failed its checksum
            raise ApplianceError(f"{db}: the store cannot be read: {first_line(error)}{repair_hint(db)}") from None
    return CheckReport(runs, unjournaled, other)


@dataclass
class RepairReport:
    moved_to: Path | None
    rebuilt_runs: dict[str, int] = field(default_factory=dict)
    copied_runs: list[str] = field(default_factory=list)
    copied_tables: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    damaged_journal_lines: int = 0

    def lines(self) -> list[str]:
        found = [f"run {run}: {n} episodes rebuilt from the journal" for run, n in sorted(self.rebuilt_runs.items())]
        if self.copied_runs:
            found.append(f"runs copied from the damaged file (no journal): {', '.join(self.copied_runs)}")
        if self.copied_tables:
            found.append(f"copied from the damaged file: {', '.join(self.copied_tables)}")
        found += [f"not recovered: {what}" for what in self.lost]
        if self.damaged_journal_lines:
            found.append(f"journal lines skipped (torn or damaged): {self.damaged_journal_lines}")
        if self.moved_to is not None:
            found.append(f"the damaged file is kept as {self.moved_to}")
        return found


def repair_store(db: Path) -> RepairReport:
    """Rebuild `db` from its journal and whatever the old file still reads; the old file is kept aside."""
    streams = Journal(journal_folder(db)).streams()
    if not streams and not db.exists():
        raise ApplianceError(f"{db}: no database and no journal ({journal_folder(db)}) to rebuild it from")
    target = db.with_name(db.name + ".repairing")
    _remove_database(target)
    report = RepairReport(moved_to=None)
    run_streams = [(journaled_run_id(s), s) for s in streams if s.is_run]
    journaled = [run_id for run_id, _ in run_streams if run_id is not None]
    with Store.open(target, journaled=False) as rebuilt:
        if db.exists():
            _copy_readable(rebuilt, db, journaled, report)
        else:
            report.lost.append(f"{db} does not exist: only what the journal holds")
        with rebuilt.transaction():
            for stream in streams:
                report.damaged_journal_lines += len(stream.damaged_lines)
                if not stream.is_run:
                    replay(stream.records, rebuilt)
            for run_id, stream in run_streams:
                if run_id is None:
                    if stream.records:
                        report.lost.append(f"{stream.path.name}: its first record (the run) is damaged")
                    continue
                replay(stream.records, rebuilt)
                report.rebuilt_runs[run_id] = rebuilt.episode_count(run_id)
        rebuilt.connection.execute("CHECKPOINT")
    if db.exists():
        report.moved_to = db.with_name(f"{db.name}.damaged-{datetime.now(UTC):%Y%m%d-%H%M%S}")
        _move_database(db, report.moved_to)
    _move_database(target, db)
    _remove_database(target)  # the rebuilt file has moved: only its lock files are left
    return report


def _copy_readable(rebuilt: Store, db: Path, journaled: list[str], report: RepairReport) -> None:
    """What no journal holds, copied from the damaged file table by table, as far as it reads."""
    connection = rebuilt.connection
    try:
        connection.execute(f"ATTACH '{_quoted(db)}' AS damaged (READ_ONLY)")
        version = connection.execute("SELECT max(version) FROM damaged.schema_version").fetchone()
    except duckdb.Error as error:
        report.lost.append(
            f"{db} could not be opened ({first_line(error)}): runs without a journal, label sets, "
            "cached label verdicts and benches (re-import label sets with 'appliance labels import')"
        )
        return
    if version is None or version[0] != LATEST_VERSION:
        report.lost.append(f"{db} has schema version {version and version[0]}, not {LATEST_VERSION}: nothing copied")
        return
    connection.execute("CREATE TEMP TABLE journaled_runs (run_id VARCHAR)")
    for run_id in journaled:
        connection.execute("INSERT INTO journaled_runs VALUES (?)", [run_id])
    outside_journals = "run_id NOT IN (SELECT run_id FROM journaled_runs)"
    unjournaled, _ = _try(connection, f"SELECT run_id FROM damaged.runs WHERE {outside_journals} ORDER BY 1")
    report.copied_runs = [str(r) for (r,) in unjournaled or []]
    for table, select in _RUN_ROWS.items():
        _, failure = _try(
            connection, f"INSERT INTO {table} " + select.format(db="damaged.").replace("run_id = ?", outside_journals)
        )
        if failure:
            report.lost.append(f"{table} of runs without a journal ({failure})")
    for table in _WHOLE_TABLES:
        _, failure = _try(connection, f"INSERT INTO {table} SELECT * FROM damaged.{table}")
        if failure:
            report.lost.append(f"{table} ({failure})")
        else:
            report.copied_tables.append(table)
    connection.execute("DETACH damaged")


def _try(connection: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[tuple[Any, ...]] | None, str]:
    """(rows, "") of `sql`, or (None, the reason) where the damaged file fails it."""
    try:
        return connection.execute(sql).fetchall(), ""
    except duckdb.Error as error:
        return None, str(error).splitlines()[0]


def check_run(run_id: str, stream: Stream, stored: Store) -> RunCheck:
    """The run's rows as its journal makes them (replayed into memory) against the store's. The store is read in
    one transaction after the replay, so a writable store is held only while it is read."""
    with _memory_store() as expected:
        replay(stream.records, expected)
        check = RunCheck(run_id, expected.episode_count(run_id), damaged_lines=stream.damaged_lines)
        want = {table: _rows(expected, sql, run_id) for table, sql in _RUN_ROWS.items()}
    with stored.transaction():
        have = {table: _rows(stored, sql, run_id) for table, sql in _RUN_ROWS.items()}
    rows = {table: (want[table], have[table]) for table in _RUN_ROWS}
    check.run_row_differs = any(rows[t][0] != rows[t][1] for t in ("runs", "models"))
    journal_ids = {row[0] for row in rows["episodes"][0]}
    store_ids = {row[0] for row in rows["episodes"][1]}
    check.missing = sorted(journal_ids - store_ids)
    check.extra = sorted(store_ids - journal_ids)
    differing: set[str] = set()
    for table in ("episodes", "messages", "judgments", "scores"):
        want_rows, have_rows = rows[table]
        differing |= {row[0] for row in (want_rows - have_rows) + (have_rows - want_rows)}
    check.differing = sorted(differing & journal_ids & store_ids)
    return check


def _check_other(stream: Stream, stored: Store) -> list[str]:
    problems = []
    for record in stream.records:
        if record.kind == "instance_set" and not stored.query(
            "SELECT 1 FROM instance_sets WHERE name = ?", [record.body["name"]]
        ):
            problems.append(f"instance set '{record.body['name']}' is journaled but not stored")
        if record.kind == "calibration" and not stored.query(
            "SELECT 1 FROM calibrations WHERE calibration_id = ?", [record.body["calibration_id"]]
        ):
            problems.append(f"calibration '{record.body['calibration_id']}' is journaled but not stored")
    return problems


def _rows(store: Store, sql: str, run_id: str) -> Counter[tuple[Any, ...]]:
    return Counter(store.query(sql.format(db=""), [run_id]))


def _read_everything(store: Store) -> None:
    """Read every table whole: DuckDB verifies a block's checksum when it reads it."""
    tables = store.query("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'")
    for (table,) in tables:
        store.query(f'SELECT * FROM "{table}"')


def _memory_store() -> Store:
    store = Store(duckdb.connect(":memory:"), Path(":memory:"), read_only=False)
    store._migrate()
    return store


@contextmanager
def _unjournaled(store: Store) -> Iterator[None]:
    """Writes that come from the journal are not journaled twice."""
    journal, store.journal = store.journal, None
    try:
        yield
    finally:
        store.journal = journal


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")


def _remove_database(path: Path) -> None:
    for suffix in ("", ".wal", ".lock", ".lock.wait"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def _move_database(source: Path, target: Path) -> None:
    """The file and its write-ahead log move together (the log replays into the file on open)."""
    shutil.move(source, target)
    wal = source.with_name(source.name + ".wal")
    if wal.exists():
        shutil.move(wal, target.with_name(target.name + ".wal"))
