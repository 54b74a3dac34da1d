"""User-facing errors.

Anything a user can fix (a bad file, an unknown name, a missing model) raises
`ApplianceError`; the CLI prints its one-line message and exits with code 2.
Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError


class ApplianceError(Exception):
    """A problem with the user's input or configuration (exit code 2)."""


def first_line(error: BaseException) -> str:
    """An error's first line, for a one-line message; its type's name when it says nothing."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _first_problem(error: ValidationError) -> tuple[str, str]:
    """The dotted field and the message of a validation's first problem ('' for the whole model)."""
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"])
    return location, first["msg"].removeprefix("Value error, ")  # pydantic's words for a check of ours


def first_field_error(error: ValidationError) -> str:
    """The first problem of a nested model's validation, as "field 'a.b': what is wrong"."""
    location, message = _first_problem(error)
    return f"field '{location}': {message}"


def describe_validation_error(source: str | Path, error: ValidationError) -> str:
    """Turn a pydantic error into one line naming the file, the field and the problem."""
    location, message = _first_problem(error)
    extra = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    if not location and message.startswith("field '"):  # a check over the whole entry that names its field
        return f"{source}: {message}{extra}"
    return f"{source}: field '{location or '(top level)'}': {message}{extra}"


@contextmanager
def reading(source: str | Path) -> Iterator[None]:
    """Around code that reads a user's file: a malformed value its checks missed is reported in one line.

    Loaders check the structure they rely on and name the field; this is the net under them, so that
    a hostile file (a list where a table was expected, a template with stray braces) never ends in
    a traceback. It names the file and the error, not always the field.
    """
    try:
        yield
    except ApplianceError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as error:
        detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ApplianceError(f"{source}: malformed content ({type(error).__name__}: {detail})"[:500]) from None
