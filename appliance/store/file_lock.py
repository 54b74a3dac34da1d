"""The store's own lock: `<db>.lock` beside the file, held from before DuckDB opens it until after DuckDB has closed it.

DuckDB's lock is a POSIX record lock on the database file. Such a lock belongs to the process and is
dropped as soon as the process closes *any* descriptor of that file, and DuckDB gives it up when its
database instance is torn down, while the instance may still be finishing its shutdown. The store's
correctness across processes should not rest on either. So every open of a store first takes a BSD
`flock` on a separate file (shared for readers, exclusive for writers; it belongs to the descriptor,
not the process) and lets it go only after the DuckDB connection is closed: two processes never have
the file open for writing at once, nor a reader beside a writer, whatever DuckDB does inside.

Several stores of one path in one process share one hold (counted), as DuckDB shares one instance.

Waiting is polling (`flock` cannot time out), so a reader polling between two runs that write back to
back could wait for its whole budget. A reader that finds the store busy therefore announces itself
with a shared `flock` on `<db>.lock.wait` until it gets in, and a writer that sees one waiting steps
back for a moment (at most `WRITER_YIELD_S` in all per open) before it takes the lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from appliance.errors import ApplianceError

#: how long in all a writer steps back for waiting readers before it takes its turn anyway
WRITER_YIELD_S = 1.0


def lock_path(db: Path) -> Path:
    """Where the lock of store `db` lives: `<db>.lock` beside it."""
    return db.with_name(db.name + ".lock")


def _wait_path(db: Path) -> Path:
    return db.with_name(db.name + ".lock.wait")


@dataclass
class _Hold:
    descriptor: int
    exclusive: bool
    count: int


_holds: dict[str, _Hold] = {}
_guard = threading.Lock()


class Busy(Exception):
    """Another process holds the lock in a conflicting mode."""


def acquire(db: Path, exclusive: bool) -> None:
    """Take the lock once, without waiting; Busy when another process holds it in a conflicting mode. A reader
    of a store in a folder it cannot write goes without (`release` is then a no-op): no writer can write there
    either."""
    key = str(lock_path(db).resolve())
    with _guard:
        held = _holds.get(key)
        if held is not None:
            if exclusive and not held.exclusive:
                _upgrade(held.descriptor)
                held.exclusive = True
            held.count += 1
            return
        try:
            descriptor = os.open(key, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as error:
            if not exclusive and error.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
                return
            raise ApplianceError(f"{key}: cannot open the store's lock file: {error.strerror}") from None
        try:
            _flock(descriptor, exclusive)
        except BaseException:
            os.close(descriptor)
            raise
        _holds[key] = _Hold(descriptor, exclusive, 1)


def release(db: Path) -> None:
    key = str(lock_path(db).resolve())
    with _guard:
        held = _holds.get(key)
        if held is None:
            return
        held.count -= 1
        if held.count == 0:
            del _holds[key]
            os.close(held.descriptor)  # closing the descriptor lets the flock go


def _flock(descriptor: int, exclusive: bool) -> None:
    try:
        fcntl.flock(descriptor, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        raise Busy from None


def _upgrade(descriptor: int) -> None:
    """Shared to exclusive on the same descriptor. flock converts by letting go first: where another process
    holds it too, the shared lock is taken back before Busy is raised."""
    try:
        _flock(descriptor, exclusive=True)
    except Busy:
        fcntl.flock(descriptor, fcntl.LOCK_SH)
        raise


def wait_for(db: Path, exclusive: bool, deadline: float) -> None:
    """`acquire`, retrying with backoff until `deadline` (time.monotonic()); Busy once it passes. Waiting readers
    go first (see the module's docstring)."""
    delay = 0.005
    waiting: int | None = None
    yield_until = time.monotonic() + WRITER_YIELD_S
    try:
        while True:
            if not (exclusive and time.monotonic() < yield_until and _readers_waiting(db)):
                try:
                    acquire(db, exclusive)
                    return
                except Busy:
                    if time.monotonic() >= deadline:
                        raise
                if not exclusive and waiting is None:
                    waiting = _announce(db)
            elif time.monotonic() >= deadline:
                raise Busy
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.05 if waiting is not None else 0.25)
    finally:
        if waiting is not None:
            os.close(waiting)


def _announce(db: Path) -> int | None:
    """A shared hold on `<db>.lock.wait` while this reader waits (None where the folder is not writable)."""
    try:
        descriptor = os.open(_wait_path(db), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return None
    fcntl.flock(descriptor, fcntl.LOCK_SH)  # writers only ever test it: never held exclusively for long
    return descriptor


def _readers_waiting(db: Path) -> bool:
    try:
        descriptor = os.open(_wait_path(db), os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)  # closing lets go of the test lock, if it was taken
    return False
