"""A damaged store, wherever DuckDB finds it: one line naming the store and the commands that mend it.

DuckDB checks a block's checksum when a query first reads the block, not when the file opens, so
damage past the file's headers surfaces in whichever query reaches it first: inside a report, an
export, a rescoring or a resume, possibly wrapped in another exception. Rather than every command
catching it, the CLI asks `damage_line` once about any exception that reaches it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from appliance.errors import first_line
from appliance.store.database import duckdb

#: every store file this process opened, in order (a query's error does not say which file it read)
_opened: list[Path] = []

#: DuckDB errors that say nothing of the file's blocks: mistakes in our SQL (parser, binder, catalog,
#: constraint), an interrupted query, memory, a transaction conflict; they keep their own handling
_NOT_DAMAGE: tuple[type[duckdb.Error], ...] = (
    duckdb.ParserException,
    duckdb.BinderException,
    duckdb.CatalogException,
    duckdb.ConstraintException,
    duckdb.InterruptException,
    duckdb.OutOfMemoryException,
    duckdb.TransactionException,
)
#: another process holds the file: busy, not damaged (opening waits for it; see store.connect_waiting)
_LOCKED = ("could not set lock", "conflicting lock")


def note_opened(path: Path) -> None:
    if path not in _opened:
        _opened.append(path)


def _chain(error: BaseException) -> Iterator[BaseException]:
    """`error`, the exceptions it was raised from (or during, where that context is shown), and those a
    group holds."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        context = None if current.__suppress_context__ else current.__context__
        pending += [e for e in (current.__cause__, context) if e is not None]
        if isinstance(current, BaseExceptionGroup):
            pending += list(current.exceptions)


def store_damage(error: BaseException) -> duckdb.Error | None:
    """The DuckDB error behind `error` that means the file could not be read, if there is one."""
    for link in _chain(error):
        locked = any(words in str(link).lower() for words in _LOCKED)
        if isinstance(link, duckdb.Error) and not isinstance(link, _NOT_DAMAGE) and not locked:
            return link
    return None


def damage_line(error: BaseException) -> str | None:
    """The one line for a store DuckDB could not read (None when `error` is something else): the
    store, DuckDB's reason, and `appliance store check` / `store repair` with the store's path."""
    damage = store_damage(error)
    if damage is None:
        return None
    reason = first_line(damage)
    if len(_opened) == 1:
        path = _opened[0]
        return (
            f"{path}: the store could not be read ({reason}); check it with 'appliance store check --db {path}' "
            f"and rebuild it from its journal with 'appliance store repair --db {path}'"
        )
    which = f"one of the stores {', '.join(str(p) for p in _opened)}" if _opened else "the store"
    return (
        f"{which} could not be read ({reason}); check each with 'appliance store check --db PATH' and rebuild "
        "it from its journal with 'appliance store repair --db PATH'"
    )
