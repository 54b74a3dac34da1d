"""The DuckDB store: one file holds every run, transcript and verdict.

DuckDB lets one process open a file for writing, or several for reading, never both. So a run
does not keep the file: it opens it for each short write (a finished episode, in one
transaction, so a killed run leaves only whole episodes behind) and lets it go again, and every
command that finds the file busy waits with backoff for up to $APPLIANCE_LOCK_WAIT_S seconds
(default 60) before it fails with one line. Readers (report, view, compare, export) are short too,
so two runs, and reports of a live run, share one file.

Two rules keep what one process committed from being lost by the next (docs/architecture.md,
"Several processes, one store"): the store's own lock (`file_lock.py`) is held from before DuckDB
opens the file until after it has closed it, and a writer checkpoints as it closes, so no
write-ahead log is ever handed from one process to another.

Every write of a run (and every instance set and calibration) is first appended to the store's
journal (`journal.py`), so a file that a kill left unreadable is rebuilt by `appliance store repair`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError, first_line
from appliance.paths import staging_path
from appliance.store import file_lock
from appliance.store.damage import note_opened
from appliance.store.database import duckdb
from appliance.store.journal import Journal, journal_folder, run_stream
from appliance.store.records import (
    EpisodeRecord,
    JudgmentRecord,
    MessageRecord,
    ModelRecord,
    RunRecord,
    ScoreRecord,
    StoredRun,
)
from appliance.store.schema import LATEST_VERSION, MIGRATIONS

DB_ENVIRONMENT_VARIABLE = "APPLIANCE_DB"
DEFAULT_DB_FILE = "appliance.duckdb"
LOCK_WAIT_VARIABLE = "APPLIANCE_LOCK_WAIT_S"
DEFAULT_LOCK_WAIT_S = 60.0


def default_db_path() -> Path:
    return Path(os.environ.get(DB_ENVIRONMENT_VARIABLE) or DEFAULT_DB_FILE)


def lock_wait_s() -> float:
    raw = os.environ.get(LOCK_WAIT_VARIABLE)
    try:
        return DEFAULT_LOCK_WAIT_S if raw is None else max(0.0, float(raw))
    except ValueError:
        raise ApplianceError(f"${LOCK_WAIT_VARIABLE}: '{raw}' is not a number of seconds") from None


def _is_lock_conflict(error: duckdb.Error) -> bool:
    """Another process holds the file ("Could not set lock ... Conflicting lock"); not a corrupt block."""
    message = str(error).lower()
    return "could not set lock" in message or "conflicting lock" in message


def create_whole(path: Path) -> None:
    """Put an empty database at `path` unless a file is there, so that the path only ever names a whole one.

    DuckDB creates a new file before it writes its header: a second process opening it in that moment
    fails with "not a valid DuckDB database file" (two runs started together into a new store, CI
    2026-11-30). So the file is built at its `staging_path` and hard-linked into place, which fails
    rather than overwrite when another process got there first. Where the filesystem has no hard links
    it is renamed into place if the path is still free, which narrows the window without closing it.
    """
    if str(path) == ":memory:" or path.exists():
        return
    staging = staging_path(path)
    try:
        duckdb.connect(str(staging)).close()
        try:
            os.link(staging, path)
        except FileExistsError:
            pass  # another process created it: theirs is whole too
        except OSError:
            if not path.exists():
                os.replace(staging, path)
    except (duckdb.Error, OSError) as error:
        raise ApplianceError(f"{path}: cannot create database: {first_line(error)}") from None
    finally:
        staging.unlink(missing_ok=True)


def connect_waiting(path: Path, read_only: bool, wait_s: float) -> duckdb.DuckDBPyConnection:
    """Open the file under the store's lock, retrying with backoff while another process holds either lock, for
    at most `wait_s`. The lock stays held until `close_connection`.

    A writable connection checkpoints when it closes (DuckDB's default): the file it leaves is whole and has
    no write-ahead log, so no other process ever replays this one's log (the shared-store test lost a committed
    episode in one of those hand-overs; docs/architecture.md). A kill inside that checkpoint can still spoil
    the file: the journal rebuilds it (`appliance store repair`)."""
    if str(path) == ":memory:":
        return duckdb.connect(":memory:")
    note_opened(path)
    if not read_only:
        create_whole(path)
    deadline = time.monotonic() + wait_s
    delay = 0.01
    while True:
        try:
            file_lock.wait_for(path, exclusive=not read_only, deadline=deadline)
        except file_lock.Busy:
            raise ApplianceError(_busy(path, wait_s, "another appliance process holds the store's lock")) from None
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as error:
            file_lock.release(path)
            reason = first_line(error)
            if not _is_lock_conflict(error):
                raise ApplianceError(f"{path}: cannot open database: {reason}{repair_hint(path)}") from None
            if time.monotonic() >= deadline:
                raise ApplianceError(_busy(path, wait_s, reason)) from None
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.5)


def close_connection(connection: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Close (a writer checkpoints here), then let the store's lock go: never the other way round."""
    try:
        connection.close()
    finally:
        if str(path) != ":memory:":
            file_lock.release(path)


def _busy(path: Path, wait_s: float, reason: str) -> str:
    longer = f"set ${LOCK_WAIT_VARIABLE} to wait longer"
    return f"{path}: another process kept the database busy for {wait_s:g} s ({longer}): {reason}"


def repair_hint(path: Path) -> str:
    """What to do about a store DuckDB cannot read, where a journal exists to rebuild it from."""
    if not journal_folder(path).is_dir():
        return ""
    return f"; check it with 'appliance store check --db {path}', rebuild it with 'appliance store repair --db {path}'"


class Store:
    """One DuckDB file. The connection opens on first use; a transaction lets the file go when it
    ends, so a long job (a run, a rescoring, a calibration) holds it only while it writes or plans,
    and other runs and readers get their turn in between."""

    def __init__(
        self,
        connection: duckdb.DuckDBPyConnection | None,
        path: Path,
        read_only: bool,
        journal: Journal | None = None,
    ) -> None:
        self._connection = connection
        self.path = path
        self.read_only = read_only
        #: where writes go first; None for a store being rebuilt from its journal, or in memory
        self.journal = journal
        self._transaction_depth = 0

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        if self._connection is None:
            self._connection = connect_waiting(self.path, self.read_only, lock_wait_s())
        return self._connection

    def _release(self) -> None:
        """Close the file until the next use, so other runs and readers can open it meanwhile."""
        if self._connection is not None and self._transaction_depth == 0 and str(self.path) != ":memory:":
            connection, self._connection = self._connection, None
            close_connection(connection, self.path)

    @classmethod
    def open(cls, path: str | Path | None = None, *, read_only: bool = False, journaled: bool = True) -> Store:
        """`journaled=False` only for a store that is being rebuilt from a journal."""
        target = Path(path) if path is not None else default_db_path()
        if read_only and not target.is_file():
            raise ApplianceError(f"{target}: database not found (run 'appliance run' first or pass --db)")
        if not read_only:
            parent = target.parent if str(target.parent) else Path(".")
            if not parent.is_dir():
                raise ApplianceError(f"{target}: database folder {parent} does not exist")
            if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
                raise ApplianceError(f"{target}: database path is not writable")
        journal = Journal(journal_folder(target)) if journaled and not read_only else None
        store = cls(connect_waiting(target, read_only, lock_wait_s()), target, read_only, journal)
        try:
            store._migrate()
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            close_connection(connection, self.path)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema -----------------------------------------------------------

    def schema_version(self) -> int:
        exists = self.connection.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
        ).fetchone()
        if not exists or exists[0] == 0:
            return 0
        row = self.connection.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def _migrate(self) -> None:
        current = self.schema_version()
        if current > LATEST_VERSION:
            raise ApplianceError(
                f"{self.path}: database schema version {current} is newer than this appliance ({LATEST_VERSION})"
            )
        if current == LATEST_VERSION:
            return
        if self.read_only:
            raise ApplianceError(f"{self.path}: database needs migration; open it once for writing")
        with self.transaction():
            self.connection.execute(
                "CREATE TABLE IF NOT EXISTS schema_version "
                "(version INTEGER PRIMARY KEY, description VARCHAR, applied_at TIMESTAMP)"
            )
            for version, description, ddl in MIGRATIONS:
                if version <= current:
                    continue
                self.connection.execute(ddl)
                self.connection.execute("INSERT INTO schema_version VALUES (?, ?, ?)", [version, description, _now()])

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing; reads inside see one state of the store. The file is let go at the end.
        Inside another transaction, this one joins it."""
        if self._transaction_depth > 0:
            yield
            return
        connection = self.connection
        connection.execute("BEGIN TRANSACTION")
        self._transaction_depth += 1
        try:
            yield
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        else:
            connection.execute("COMMIT")
        finally:
            self._transaction_depth -= 1
            self._release()

    # -- writing ----------------------------------------------------------

    def journal_append(self, stream: str, kind: str, body: dict[str, Any]) -> None:
        """Durably record a write before the transaction that makes it commits."""
        if self.journal is not None:
            self.journal.append(stream, kind, body)

    def create_run(self, run: RunRecord, models: Sequence[ModelRecord]) -> None:
        with self.transaction():
            self._journal_run(run, models)
            self._insert_run(run, models)

    def _journal_run(self, run: RunRecord, models: Sequence[ModelRecord]) -> None:
        self.journal_append(
            run_stream(run.run_id),
            "run",
            {"run": run.model_dump(mode="json"), "models": [m.model_dump(mode="json") for m in models]},
        )

    def _insert_run(self, run: RunRecord, models: Sequence[ModelRecord]) -> None:
        self.connection.execute(
            "INSERT INTO runs (run_id, started_at, finished_at, status, seed, config, versions, git_revision, "
            "file_hashes, wall_s) VALUES (?, ?, NULL, 'running', ?, ?, ?, ?, ?, NULL)",
            [
                run.run_id,
                run.started_at,
                run.seed,
                json.dumps(run.config),
                json.dumps(run.versions),
                run.git_revision,
                json.dumps(run.file_hashes),
            ],
        )
        for model in models:
            self.connection.execute(
                "INSERT INTO models VALUES (?, ?, ?, ?, ?, ?)",
                [run.run_id, model.name, model.backend, model.path, model.sha256, json.dumps(model.parameters)],
            )

    def write_episode(self, episode: EpisodeRecord) -> None:
        """All of an episode or nothing: the transaction makes resumption exact."""
        self.write_episodes([episode])

    def write_episodes(self, episodes: Sequence[EpisodeRecord]) -> None:
        """Several episodes in one transaction (imports: all or nothing)."""
        with self.transaction():
            for episode in episodes:
                self.journal_append(run_stream(episode.run_id), "episode", episode.model_dump(mode="json"))
                self._write_episode_rows(episode)

    def _write_episode_rows(self, episode: EpisodeRecord) -> None:
        # A failed attempt of this episode (from an earlier, resumed run) is replaced.
        for table in ("messages", "judgments", "scores", "episodes"):
            self.connection.execute(f"DELETE FROM {table} WHERE episode_id = ?", [episode.episode_id])
        self.connection.execute(
            "INSERT INTO episodes (episode_id, run_id, scenario, instance_id, player, status, seed, started_at, "
            "finished_at, wall_s, error, metadata, player_model, partner_model) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                episode.episode_id,
                episode.run_id,
                episode.scenario,
                episode.instance_id,
                episode.player,
                episode.status,
                episode.seed,
                episode.started_at,
                episode.finished_at,
                episode.wall_s,
                episode.error,
                json.dumps(episode.metadata),
                episode.player_model,
                episode.partner_model,
            ],
        )
        self._insert_messages(episode)
        self._insert_verdicts(episode.episode_id, episode.run_id, episode.judgments, episode.scores)

    def replace_panel_verdicts(
        self,
        episode_id: str,
        run_id: str,
        panel: str,
        judgments: Sequence[JudgmentRecord],
        scores: Sequence[ScoreRecord],
    ) -> None:
        """Rescoring: one panel's verdicts of an episode are replaced; other panels' stay."""
        with self.transaction():
            self.journal_append(
                run_stream(run_id),
                "verdicts",
                {
                    "episode_id": episode_id,
                    "panel": panel,
                    "judgments": [j.model_dump(mode="json") for j in judgments],
                    "scores": [s.model_dump(mode="json") for s in scores],
                },
            )
            for table in ("judgments", "scores"):
                self.connection.execute(f"DELETE FROM {table} WHERE episode_id = ? AND panel = ?", [episode_id, panel])
            self._insert_verdicts(episode_id, run_id, judgments, scores)

    def _insert_messages(self, episode: EpisodeRecord) -> None:
        self.insert_rows(
            "INSERT INTO messages VALUES",
            [
                [
                    episode.episode_id,
                    m.idx,
                    m.speaker,
                    m.model,
                    m.text,
                    m.prompt_tokens,
                    m.cached_prompt_tokens,
                    m.completion_tokens,
                    m.latency_s,
                    m.finish_reason,
                ]
                for m in episode.messages
            ],
        )

    def _insert_verdicts(
        self, episode_id: str, run_id: str, judgments: Sequence[JudgmentRecord], scores: Sequence[ScoreRecord]
    ) -> None:
        self.insert_rows(
            "INSERT INTO judgments (episode_id, panel, judge, mode, template, target_idx, criterion, score, "
            "raw_text, parsed, order_swapped) VALUES",
            [
                [
                    episode_id,
                    j.panel,
                    j.judge,
                    j.mode,
                    j.template,
                    j.target_idx,
                    j.criterion,
                    j.score,
                    j.raw_text,
                    j.parsed,
                    j.order_swapped,
                ]
                for j in judgments
            ],
        )
        self.insert_rows(
            "INSERT INTO scores (episode_id, run_id, panel, player, metric, value, calibrated_value, "
            "calibration_id) VALUES",
            [
                [episode_id, run_id, s.panel, s.player, s.metric, s.value, s.calibrated_value, s.calibration_id]
                for s in scores
            ],
        )

    def insert_rows(self, insert: str, rows: Sequence[Sequence[Any]], chunk: int = 256) -> None:
        """Multi-row INSERT statements: DuckDB's executemany costs a round trip per row."""
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            placeholder = "(" + ", ".join(["?"] * len(part[0])) + ")"
            self.connection.execute(
                f"{insert} " + ", ".join([placeholder] * len(part)), [value for row in part for value in row]
            )

    def import_run(self, run: RunRecord, models: Sequence[ModelRecord], episodes: Sequence[EpisodeRecord]) -> bool:
        """A whole run from another system in one transaction; False when `run.run_id` is already stored."""
        if self.has_run(run.run_id):
            return False
        with self.transaction():
            self._journal_run(run, models)
            self._insert_run(run, models)
            self.write_episodes(episodes)
            self.finish_run(run.run_id, "imported", 0.0)
        return True

    def write_bench(
        self,
        bench_id: str,
        started_at: datetime,
        quick: bool,
        machine: dict[str, Any],
        versions: dict[str, str],
        results: dict[str, Any],
    ) -> None:
        self.connection.execute(
            "INSERT INTO bench VALUES (?, ?, ?, ?, ?, ?)",
            [bench_id, started_at, quick, json.dumps(machine), json.dumps(versions), json.dumps(results)],
        )

    def set_planned(self, run_id: str, episodes: int) -> None:
        """How many episodes the run has planned so far (staged families plan a stage at a time)."""
        with self.transaction():
            self.journal_append(run_stream(run_id), "planned", {"episodes": episodes})
            self.connection.execute("UPDATE runs SET planned_episodes = ? WHERE run_id = ?", [episodes, run_id])

    def progress(self, run_id: str) -> tuple[int, int, int | None]:
        """(finished, failed, planned) episodes of a run, as stored now."""
        row = self.connection.execute(
            "SELECT count(*) FILTER (status = 'finished'), count(*) FILTER (status <> 'finished') "
            "FROM episodes WHERE run_id = ?",
            [run_id],
        ).fetchone()
        planned = self.run(run_id).planned_episodes
        return (int(row[0]), int(row[1]), None if planned is None else int(planned)) if row else (0, 0, planned)

    def finish_run(self, run_id: str, status: str, wall_s: float, finished_at: datetime | None = None) -> None:
        """The run's status as it ends (again, after a resume: its wall time adds up)."""
        finished_at = finished_at or _now()
        with self.transaction():
            self.journal_append(
                run_stream(run_id),
                "finish",
                {"status": status, "wall_s": wall_s, "finished_at": finished_at.isoformat()},
            )
            self.connection.execute(
                "UPDATE runs SET status = ?, finished_at = ?, wall_s = coalesce(wall_s, 0) + ? WHERE run_id = ?",
                [status, finished_at, wall_s, run_id],
            )

    # -- reading ----------------------------------------------------------

    def latest_run_id(self) -> str | None:
        row = self.connection.execute("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1").fetchone()
        return str(row[0]) if row else None

    def resolve_run_id(self, run_id: str | None) -> str:
        """`run_id` itself, or the latest run where none is given; a clear error on an empty store."""
        resolved = run_id or self.latest_run_id()
        if resolved is None:
            raise ApplianceError(f"{self.path}: no runs stored yet (run 'appliance run' first)")
        return resolved

    def run(self, run_id: str) -> StoredRun:
        row = self.connection.execute(
            "SELECT run_id, started_at, finished_at, status, seed, config, wall_s, planned_episodes FROM runs "
            "WHERE run_id = ?",
            [run_id],
        ).fetchone()
        if row is None:
            raise ApplianceError(f"{self.path}: no run '{run_id}'")
        run, started, finished, status, seed, config, wall, planned = row
        return StoredRun(
            str(run), started, finished, str(status), int(seed), json.loads(config), wall, planned, self.path
        )

    def run_models(self, run_id: str) -> list[ModelRecord]:
        """The models a run recorded when it started: backend, file, hash and catalog parameters."""
        rows = self.query_records(
            "SELECT name, backend, path, sha256, parameters FROM models WHERE run_id = ? ORDER BY name", [run_id]
        )
        return [ModelRecord(**(row | {"parameters": json.loads(row["parameters"])})) for row in rows]

    def run_file_hashes(self, run_id: str) -> dict[str, str]:
        """The sha256 of each file the run read when it started (models file, families' data), by path."""
        rows = self.query("SELECT file_hashes FROM runs WHERE run_id = ?", [run_id])
        return {str(path): str(digest) for path, digest in json.loads(rows[0][0]).items()} if rows else {}

    def episode_players(self, run_id: str) -> list[str]:
        """Every player label of the run's episodes, sorted."""
        return [
            str(p) for (p,) in self.query("SELECT DISTINCT player FROM episodes WHERE run_id = ? ORDER BY 1", [run_id])
        ]

    def episode_statuses(self, run_id: str) -> dict[str, int]:
        """How many of the run's episodes have each status."""
        rows = self.query("SELECT status, count(*) FROM episodes WHERE run_id = ? GROUP BY 1", [run_id])
        return {str(status): int(count) for status, count in rows}

    def scenarios_stored(self, run_id: str) -> set[str]:
        """The scenarios of which the run has stored at least one episode."""
        return {
            str(name) for (name,) in self.query("SELECT DISTINCT scenario FROM episodes WHERE run_id = ?", [run_id])
        }

    def finished_score_values(self, run_id: str, scenario: str) -> list[tuple[str, str, float]]:
        """(metric, scored player, value) of every score of the scenario's finished episodes, calibrated
        where calibrated, sorted by metric and player."""
        rows = self.query(
            "SELECT s.metric, s.player, coalesce(s.calibrated_value, s.value) FROM scores s "
            "JOIN episodes e USING (episode_id) WHERE e.run_id = ? AND e.scenario = ? AND e.status = 'finished' "
            "AND coalesce(s.calibrated_value, s.value) IS NOT NULL ORDER BY 1, 2",
            [run_id, scenario],
        )
        return [(str(metric), str(player), float(value)) for metric, player, value in rows]

    def run_transcript(self, run_id: str) -> list[tuple[str, int, str]]:
        """Every message and verdict of a run as (instance:player, index, text), the same for any run
        that played the same episodes: benchmarks compare their arms with it."""
        messages = self.query(
            "SELECT e.instance_id || ':' || e.player, m.idx, m.text FROM messages m JOIN episodes e "
            "USING (episode_id) WHERE e.run_id = ? ORDER BY 1, 2",
            [run_id],
        )
        verdicts = self.query(
            "SELECT e.instance_id || ':' || e.player, j.target_idx, j.judge || '/' || j.criterion || '/' || "
            "coalesce(j.raw_text, '') || '/' || coalesce(j.score::VARCHAR, '') FROM judgments j JOIN episodes e "
            "USING (episode_id) WHERE e.run_id = ? ORDER BY 1, 2, 3",
            [run_id],
        )
        return [(str(a), int(b), str(c)) for a, b, c in messages] + [
            (f"{a}/verdict", int(b), str(c)) for a, b, c in verdicts
        ]

    def has_run(self, run_id: str) -> bool:
        return bool(self.query("SELECT 1 FROM runs WHERE run_id = ?", [run_id]))

    def episode_count(self, run_id: str) -> int:
        return int(self.query("SELECT count(*) FROM episodes WHERE run_id = ?", [run_id])[0][0])

    def finished_episodes(self, run_id: str) -> list[tuple[str, str, str, str, str, int]]:
        """(episode id, scenario, instance id, player model, partner model, seed) of every finished episode."""
        rows = self.query(
            "SELECT episode_id, scenario, instance_id, coalesce(player_model, player), "
            "coalesce(partner_model, player_model, player), seed FROM episodes "
            "WHERE run_id = ? AND status = 'finished' ORDER BY episode_id",
            [run_id],
        )
        return [(str(e), str(s), str(i), str(p), str(q), int(seed)) for e, s, i, p, q, seed in rows]

    def finished_episode_ids(self, run_id: str) -> set[str]:
        rows = self.connection.execute(
            "SELECT episode_id FROM episodes WHERE run_id = ? AND status = 'finished'", [run_id]
        ).fetchall()
        return {str(row[0]) for row in rows}

    def episode_messages(self, episode_id: str) -> list[MessageRecord]:
        """An episode's transcript as it was written (the reverse of `_insert_messages`)."""
        fields = list(MessageRecord.model_fields)
        rows = self.query(f"SELECT {', '.join(fields)} FROM messages WHERE episode_id = ? ORDER BY idx", [episode_id])
        return [MessageRecord(**dict(zip(fields, row, strict=True))) for row in rows]

    def query(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self.connection.execute(sql, list(parameters)).fetchall())

    def query_records(self, sql: str, parameters: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows as {column: value}, for readers of wide SELECTs that should not count positions."""
        cursor = self.connection.execute(sql, list(parameters))
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
