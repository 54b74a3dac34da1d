"""docs/adding-a-family.md stays true: its code is the example family's code, its hooks are the base classes'.

The page builds `recall`, the family in tests/example_family, which mypy checks against `FamilyEntry` and
the base classes and test_architecture.py plays through the CLI. So the page is true if what it shows is
that family's code: every `def` and `class` of its Python blocks has the example's signature (bases,
fields, class attributes), its `FamilyEntry(...)` names every field of the entry and no other (a new
hook such as `headline` cannot go unmentioned), with the example's value wherever the example sets
one, and every row of its hook table names a hook of `appliance/scenarios/base.py` with its parameters.
The example is read as source (not imported), so nothing here registers it.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path

from appliance.scenarios import base
from appliance.scenarios.registry import FamilyEntry

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "adding-a-family.md"
EXAMPLE = REPO / "tests" / "example_family" / "__init__.py"
BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
#: a row of the hook table: | `name(parameters)` | default | when |
HOOK_ROW = re.compile(r"^\| `(\w+)\(([^)]*)\)` \|", flags=re.MULTILINE)
BASE_CLASSES = (base.ScenarioFamily, base.JudgedFamily, base.StagedFamily)

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _signature(node: Function) -> str:
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    return f"{prefix} {node.name}({ast.unparse(node.args)}){returns}"


def _definitions(body: list[ast.stmt], prefix: str = "") -> dict[str, ast.stmt]:
    """Top-level functions and classes by name, and each class's members as `Class.member`."""
    found: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, Function | ast.ClassDef):
            found[prefix + node.name] = node
        if isinstance(node, ast.ClassDef):
            found |= _definitions(node.body, f"{prefix}{node.name}.")
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        for target in targets if isinstance(node, ast.Assign | ast.AnnAssign) and prefix else []:
            if isinstance(target, ast.Name):
                found[prefix + target.id] = node
    return found


def _entry_calls(tree: ast.AST) -> list[ast.Call]:
    """Calls of `FamilyEntry(...)` or `FamilyEntry[Report](...)`."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func.value if isinstance(node.func, ast.Subscript) else node.func) == "FamilyEntry"
    ]


def _same(shown: ast.stmt, example: ast.stmt) -> str | None:
    """Why `shown` (the page's) is not `example` (the example family's), or None where it is."""
    if isinstance(shown, Function):
        if not isinstance(example, Function) or _signature(shown) != _signature(example):
            other = _signature(example) if isinstance(example, Function) else ast.unparse(example).splitlines()[0]
            return f"page `{_signature(shown)}`, example `{other}`"
    elif isinstance(shown, ast.ClassDef):
        bases = [ast.unparse(b) for b in shown.bases]
        if not isinstance(example, ast.ClassDef) or bases != [ast.unparse(b) for b in example.bases]:
            return f"page bases {bases}, example `{ast.unparse(example).splitlines()[0]}`"
    elif isinstance(shown, ast.AnnAssign | ast.Assign):  # a field or class attribute: its annotation and value
        value = shown.value and ast.unparse(shown.value)
        annotation = ast.unparse(shown.annotation) if isinstance(shown, ast.AnnAssign) else None
        other_annotation = ast.unparse(example.annotation) if isinstance(example, ast.AnnAssign) else None
        other_node: ast.expr | None = getattr(example, "value", None)
        other_value = other_node and ast.unparse(other_node)
        if annotation != other_annotation or value != other_value:
            return f"page `{ast.unparse(shown)}`, example `{ast.unparse(example)}`"
    return None


def drift(page: str, example_source: str) -> list[str]:
    """Every place where `page` no longer shows the example family or the registry and base classes."""
    found: list[str] = []
    example = ast.parse(example_source)
    example_definitions = _definitions(example.body)
    (example_entry,) = _entry_calls(example)
    example_values = {k.arg: ast.unparse(k.value) for k in example_entry.keywords}
    fields = {field.name for field in dataclasses.fields(FamilyEntry)}
    entries = 0
    for number, block in enumerate(BLOCK.findall(page), start=1):
        tree = ast.parse(block)
        for name, shown in _definitions(tree.body).items():
            if name not in example_definitions:
                found.append(f"block {number}: `{name}` is not in tests/example_family")
            elif (why := _same(shown, example_definitions[name])) is not None:
                found.append(f"block {number}: `{name}` differs: {why}")
        for call in _entry_calls(tree):
            entries += 1
            given = {k.arg: ast.unparse(k.value) for k in call.keywords if k.arg is not None}
            found += [f"block {number}: FamilyEntry has no field `{k}`" for k in sorted(set(given) - fields)]
            found += [f"block {number}: FamilyEntry field `{k}` is not shown" for k in sorted(fields - set(given))]
            found += [
                f"block {number}: `{k}={v}`, the example sets `{k}={example_values[k]}`"
                for k, v in given.items()
                if k in example_values and example_values[k] != v
            ]
    if entries == 0:
        found.append("the page shows no FamilyEntry(...)")
    hooks = {
        name: [p for p in inspect.signature(method).parameters if p != "self"]
        for cls in BASE_CLASSES
        for name, method in vars(cls).items()
        if inspect.isfunction(method) and not name.startswith("_")
    }
    for name, parameters in HOOK_ROW.findall(page):
        shown_parameters = [p.strip() for p in parameters.split(",") if p.strip()]
        if name not in hooks:
            found.append(f"hook table: `{name}` is no method of {', '.join(c.__name__ for c in BASE_CLASSES)}")
        elif shown_parameters != hooks[name]:
            found.append(f"hook table: `{name}({parameters})`, base.py has `{name}({', '.join(hooks[name])})`")
    named = set(re.findall(r"`(\w+)\(", page)) | set(re.findall(r"\bdef (\w+)\(", page))
    found += [f"`{name}()` of base.py is not on the page" for name in sorted(set(hooks) - named)]
    return found


def test_the_page_shows_the_example_familys_code_and_the_registrys_hooks() -> None:
    assert drift(PAGE.read_text(encoding="utf-8"), EXAMPLE.read_text(encoding="utf-8")) == []


def test_the_check_finds_a_page_that_drifted() -> None:
    """The page as it read before issue 92 (a report built from the store and a run id, no headline) and
    other slips each show up."""
    page, example = PAGE.read_text(encoding="utf-8"), EXAMPLE.read_text(encoding="utf-8")
    drifted = {
        "old report signature": page.replace(
            "def build_report(run: RunView, panel: str | None) -> RecallReport:",
            "def build_report(store: Store, run_id: str, scenario: str, panel: str | None) -> RecallReport:",
        ),
        "headline not registered": page.replace("        headline=recall_headline,", ""),
        "an invented field": page.replace("order=100,", "order=100, priority=1,"),
        "another value": page.replace("quick_limit=2,", "quick_limit=3,"),
        "a hook's parameters": page.replace("`two_player(instance)`", "`two_player(instance, players)`"),
        "a hook left out": page.replace("`lineage(instance)`", "`lineage`"),
        "a field of Fact": page.replace("    question: str\n", "    question: str | None\n"),
    }
    for what, text in drifted.items():
        assert text != page, what
        assert drift(text, example), what
    # and the example changing under the page shows too
    assert drift(page, example.replace("def recall_headline(run: RunView,", "def recall_headline(view: RunView,"))
