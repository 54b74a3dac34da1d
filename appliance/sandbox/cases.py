"""Test cases whose verdict the parent decides: a call, and the value or exception it must give.

The child evaluates `call` and sends back what came of it as plain data (see harness.plain). The
expected value stays in the parent, which rebuilds the child's value from the data and compares:
an object with a forged `__eq__`, a patched `json`, a printed "passed" line or an early exit all
end as data that matches nothing, or as no data at all.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


class TestCase(BaseModel):
    """`call` must give the Python literal `expect`, or raise the exception named by `raises`.

    `raises` names a built-in exception ("ValueError": the real one or a subclass of it), or another
    class by `module.qualname` ("candidate.EmptyError" for one the candidate defines): a class the
    candidate merely names like a built-in does not count as it.

    True, False and None are compared by identity (`is`), anything else with `==`, as the
    assertions these cases replace did.
    """

    __test__ = False  # not a pytest class
    model_config = ConfigDict(extra="forbid", frozen=True)

    call: str
    expect: str | None = None
    raises: str | None = None

    @model_validator(mode="after")
    def _check(self) -> TestCase:
        if (self.expect is None) == (self.raises is None):
            raise ValueError(f"test {self.call!r}: give exactly one of 'expect' and 'raises'")
        try:
            compile(self.call, "test", "eval")
        except SyntaxError as error:
            raise ValueError(f"test {self.call!r}: 'call' is not a Python expression ({error.msg})") from None
        if self.expect is not None:
            try:
                ast.literal_eval(self.expect)
            except (ValueError, SyntaxError):
                raise ValueError(f"test {self.call!r}: 'expect' {self.expect!r} is not a Python literal") from None
        return self

    def expected(self) -> object:
        return ast.literal_eval(self.expect) if self.expect is not None else None


@dataclass(frozen=True, eq=False)
class Opaque:
    """A value the child could not send as data (an object of its own): equal to nothing."""

    kind: str


class MalformedValue(ValueError):
    """The child's data is not a value it could have sent honestly."""


#: the harness's own bounds (harness.MAX_DEPTH, MAX_ITEMS): deeper or larger data was not sent honestly
MAX_DEPTH = 64
MAX_ITEMS = 100_000


def decode(data: object, depth: int = 0, budget: list[int] | None = None) -> object:
    """Rebuild a value from the child's data; anything but the harness's encoding is malformed,
    and so is anything deeper or larger than the harness ever sends."""
    budget = [MAX_ITEMS] if budget is None else budget
    budget[0] -= 1
    if depth > MAX_DEPTH + 1 or budget[0] < 0:
        raise MalformedValue("deeper or larger than the harness sends")
    if data is None or isinstance(data, bool | str):
        return data
    if isinstance(data, list):  # the harness tags every container; a bare array is not its encoding
        raise MalformedValue("untagged array")
    if not isinstance(data, dict) or len(data) != 1:
        raise MalformedValue(f"unexpected {type(data).__name__}")
    ((tag, body),) = data.items()
    try:
        return _decode_tagged(tag, body, depth + 1, budget)
    except MalformedValue:
        raise
    except (TypeError, ValueError, OverflowError) as error:
        raise MalformedValue(f"{tag}: {error}"[:200]) from None


def _decode_tagged(tag: str, body: Any, depth: int, budget: list[int]) -> object:

    def item(data: object) -> object:
        return decode(data, depth, budget)

    if tag == "int" and isinstance(body, str):
        return int(body)
    if tag == "float" and isinstance(body, str):
        return float(body)
    if tag == "bytes" and isinstance(body, str):
        return bytes.fromhex(body)
    if tag == "object" and isinstance(body, str):
        return Opaque(body)
    if not isinstance(body, list):
        raise MalformedValue(f"tag {tag!r} with a body of type {type(body).__name__}")
    if tag == "list":
        return [item(element) for element in body]
    if tag == "tuple":
        return tuple(item(element) for element in body)
    if tag == "set":
        return {item(element) for element in body}
    if tag == "frozenset":
        return frozenset(item(element) for element in body)
    if tag == "dict" and all(isinstance(pair, list) and len(pair) == 2 for pair in body):
        return {item(key): item(value) for key, value in body}
    raise MalformedValue(f"unknown tag {tag!r}")


def judge_case(case: TestCase, outcome: object) -> tuple[bool, str]:
    """Whether the child's outcome of `case` passes, and why not."""
    if not isinstance(outcome, dict):
        return False, "no result"
    if case.raises is not None:
        names = outcome.get("raised")
        if isinstance(names, list) and case.raises in names:
            return True, ""
        return False, f"{case.call} should raise {case.raises}, {_described(outcome)}"
    if "value" not in outcome:
        return False, f"{case.call}: {_described(outcome)}"
    try:
        value = decode(outcome["value"])
    except MalformedValue as error:
        return False, f"{case.call}: malformed result ({error})"
    expected = case.expected()
    same = value is expected if expected is None or isinstance(expected, bool) else _equal(value, expected)
    return (True, "") if same else (False, f"{case.call} returned {_shown(value)}, expected {case.expect}")


def _equal(value: object, expected: object) -> bool:
    try:
        return bool(value == expected)
    except (TypeError, ValueError, RecursionError):
        return False


def _described(outcome: dict[str, Any]) -> str:
    if "raised" in outcome:
        return f"raised {str(outcome.get('message', ''))[:200]}"
    if "value" not in outcome:
        return "gave no result"
    try:
        return f"returned {_shown(decode(outcome['value']))}"
    except MalformedValue as error:
        return f"returned a malformed result ({error})"


def _shown(value: object) -> str:
    return repr(value)[:200]
