"""The shape of the code: families and games register themselves, backends are declared; no SQL in families;
no cycles, not even between wings."""

from __future__ import annotations

import ast
import asyncio
import importlib
import importlib.metadata
import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from appliance.catalog import backends as backend_registry
from appliance.catalog.models import Catalog, ModelSpec, load_catalog
from appliance.engine.backend import Backend
from appliance.engine.factory import open_backend
from appliance.engine.scripted import ScriptedBackend
from appliance.engine.types import GenerationRequest, Message
from appliance.episodes.client import RoleBinding
from appliance.episodes.context import EpisodeContext
from appliance.episodes.scheduler import Scheduler
from appliance.errors import ApplianceError
from appliance.scenarios.clembench import games
from appliance.scenarios.clembench.family import play_game
from appliance.scenarios.clembench.generate import generate_instance_set
from appliance.scenarios.clembench.instances import ClemInstance
from appliance.scenarios.clembench.master import GameTable, Outcome
from appliance.store import Store

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "appliance"
SQL = re.compile(r"\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM|CREATE TABLE|ALTER TABLE)\b")


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def test_no_module_under_scenarios_holds_sql_or_touches_the_connection() -> None:
    offenders = []
    for path in sorted((PACKAGE / "scenarios").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("query", "connection", "execute", "executemany"):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: .{node.attr}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: SQL text")
    assert offenders == []


def module_level_imports(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported: not inside functions or classes, not under TYPE_CHECKING."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            found += module_level_imports(node.body) + module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            found += module_level_imports(node.body)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the appliance modules it imports at module level (function-level imports are deferred on
    purpose, e.g. heavy libraries, and not counted)."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for node in module_level_imports(ast.parse(path.read_text(encoding="utf-8")).body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif node.module and node.level == 0:
                targets = [
                    f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                    for alias in node.names
                ]
            else:
                targets = []
            graph[name] |= {target for target in targets if target in known and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: lower layers never import higher ones at module level
LAYERS = {
    "appliance.engine": {"appliance.scenarios", "appliance.run", "appliance.cli", "appliance.calibration"},
    "appliance.store": {
        "appliance.scenarios",
        "appliance.run",
        "appliance.episodes",
        "appliance.cli",
        "appliance.engine",
    },
    "appliance.scenarios": {"appliance.run", "appliance.cli", "appliance.calibration"},
    "appliance.calibration": {"appliance.run", "appliance.cli"},
    "appliance.episodes": {"appliance.run", "appliance.calibration", "appliance.cli", "appliance.scenarios"},
    # the one-process run never imports the Ray cluster: the CLI hands the runner a `Cluster` to play on
    "appliance.run": {"appliance.cluster", "appliance.cli"},
    # what a run is configured with sits under what reads it: models.toml's entries (the catalog, sampling,
    # synthetic shapes, the names of backends), the judge panels and the run's config
    "appliance.catalog": {"appliance.engine", "appliance.judging", "appliance.store", "appliance.episodes"},
    "appliance.run_config": {"appliance.engine", "appliance.judging", "appliance.store"},
    "appliance.util": {"appliance.catalog", "appliance.engine", "appliance.store", "appliance.scenarios"},
}


def wing_of(module: str) -> str:
    """A module's wing: its folder under appliance/, or itself for a loose module at the root."""
    return ".".join(module.split(".")[:2])


def wing_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    wings: dict[str, set[str]] = {}
    for module, targets in graph.items():
        wings.setdefault(wing_of(module), set()).update(
            wing_of(target) for target in targets if wing_of(target) != wing_of(module)
        )
    for targets in list(wings.values()):
        for target in targets:
            wings.setdefault(target, set())
    return wings


def test_the_wings_import_each_other_one_way() -> None:
    """Folders, not only modules, form no circle: each wing of the package sits above the ones it uses."""
    assert cycles(wing_graph(import_graph())) == []


#: at most this many loose modules at the package root (`__init__` and `__main__` included); the rest
#: live in wings that show the data flow
LOOSE_AT_ROOT = 10


def test_the_root_holds_few_loose_modules() -> None:
    loose = sorted(path.name for path in (REPO / "appliance").glob("*.py"))
    assert len(loose) <= LOOSE_AT_ROOT, loose


def test_no_module_imports_a_layer_above_it() -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for layer, above in LAYERS.items()
        if module.startswith(layer)
        for target in targets
        if any(target == higher or target.startswith(higher + ".") for higher in above)
    ]
    assert upward == []


def test_an_example_family_in_its_own_folder_runs_through_the_cli_on_the_real_model(tmp_path: Path) -> None:
    """A sixth family that lives in tests/example_family only: listed, played on SmolLM2, reported."""
    env = {**os.environ, "APPLIANCE_FAMILIES": "tests.example_family", "PYTHONPATH": str(REPO)}
    db = str(tmp_path / "recall.duckdb")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "appliance", *args]
        return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)

    listed = cli("scenarios", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    recall = next(row for row in json.loads(listed.stdout) if row["name"] == "recall")
    assert recall["instances"] == 3 and recall["quick_suite"] == 2
    ran = cli("run", "--scenario", "recall", "--players", "smollm2-135m", "--limit", "3", "--db", db, "--json")
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    assert summary["summary"]["episodes_finished"] == 3
    (board,) = summary["leaderboards"]
    (row,) = board["rows"]
    assert row["model"] == "smollm2-135m" and row["episodes"] == 3 and 0.0 <= row["accuracy"] <= 1.0
    shown = cli("report", "--db", db)
    assert shown.returncode == 0, shown.stderr
    assert "recall accuracy" in shown.stdout and "smollm2-135m" in shown.stdout
    # its headline hook: `compare` pairs the run with itself fact by fact (every difference is 0)
    run_id = summary["summary"]["run_id"]
    compared = cli("compare", run_id, run_id, "--db", db, "--json")
    assert compared.returncode == 0, compared.stderr
    (accuracy,) = json.loads(compared.stdout)["metrics"]
    assert (accuracy["family"], accuracy["metric"], accuracy["pairs"]) == ("recall", "accuracy", 3)
    assert accuracy["base"] == accuracy["candidate"] == pytest.approx(row["accuracy"]) and accuracy["delta"] == 0.0
    # the family's own option, declared in its folder only (RecallOptions), set on the command line,
    # stored with the run and read by the family: every reply stops at the 2 tokens it allows
    capped_db = str(tmp_path / "capped.duckdb")
    capped = cli("run", "--scenario", "recall", "--players", "smollm2-135m", "--limit", "3",
                 "--set", "recall.answer_tokens=2", "--db", capped_db, "--json")  # fmt: skip
    assert capped.returncode == 0, capped.stderr
    with Store.open(Path(capped_db), read_only=True) as store:
        (config,) = store.query("SELECT config FROM runs")
        assert json.loads(config[0])["families"] == {"recall": {"options": {"answer_tokens": 2}, "snapshot": {}}}
        tokens = [row[0] for row in store.query("SELECT completion_tokens FROM messages")]
    assert len(tokens) == 3 and max(tokens) == 2, tokens
    mistakes = {
        "recall.answer_tokens=0": "recall.answer_tokens",
        "recall.colour=red": "recall.colour",
        "clembench.x=1": "'clembench' is not a scenario of this run",
        "recall": "NAME.KEY=VALUE",
    }
    for wrong, named in mistakes.items():
        refused = cli("run", "--scenario", "recall", "--players", "smollm2-135m", "--set", wrong, "--db", capped_db)
        assert refused.returncode == 2 and named in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    missing = subprocess.run(
        [sys.executable, "-m", "appliance", "scenarios", "list"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**env, "APPLIANCE_FAMILIES": "no_such_family_module"},
        timeout=120,
    )
    assert missing.returncode == 2 and "no_such_family_module" in missing.stderr and "Traceback" not in missing.stderr


async def _toy_play(table: GameTable, instance: ClemInstance) -> Outcome:
    reply = await table.ctx.generate("player", [])
    return Outcome("success" if reply.text == instance.params["word"] else "lose", 100.0, {})


def _toy_generate(folder: Path, rng: random.Random, count: int) -> list[ClemInstance]:
    return [
        ClemInstance(id=f"echo/plain/{i}", game="echo", experiment="plain", params={"word": rng.choice("ab")})
        for i in range(count)
    ]


def _toy_convert(item: games.PublishedItem) -> tuple[str, dict[str, Any]]:
    return "echo", {"word": item.item["word"]}


def test_a_new_clembench_game_is_one_record(monkeypatch: pytest.MonkeyPatch) -> None:
    known = games.variant_names()  # discovery first, so the toy game only adds itself
    game = games.Game(name="echo", play=_toy_play, generate=_toy_generate, convert=_toy_convert, order=99)
    monkeypatch.setitem(games.GAMES.entries, "echo", game)
    assert games.variant_names() == [*known, "echo"]
    generated = generate_instance_set(REPO / "scenarios" / "clembench", seed=3, per_experiment=2)
    toy = [i for i in generated.instances if i.game == "echo"]
    assert len(toy) == 2
    scheduler = Scheduler({"m": ScriptedBackend("m", lambda request: toy[0].params["word"])})
    ctx = EpisodeContext("e", 0, scheduler, {"player": RoleBinding("m")})

    async def main() -> Outcome:
        task = asyncio.ensure_future(play_game(GameTable(ctx), toy[0]))
        await scheduler.drive(task)
        return task.result()

    assert asyncio.run(main()).status == "success"


class EchoOptions(backend_registry.BackendOptions):
    """A toy backend's own option: what it answers."""

    reply: str = "echo"


def test_a_new_backend_is_one_declaration_with_its_own_options(tmp_path: Path) -> None:
    """A backend written outside the engine (here, in this test) is one declaration: its opener and its
    options model; models.toml then takes its option for it, refuses it for another backend, and
    refuses another backend's option for it: nothing in the catalog or the engine changes."""

    def open_echo(catalog: Catalog, spec: ModelSpec, parallel: int) -> Backend:
        reply = spec.options_as(EchoOptions).reply
        return ScriptedBackend(spec.name, lambda request: reply)

    backend_registry.declare_backend(backend_registry.BackendDeclaration("echo", open_echo, EchoOptions))
    try:
        models = tmp_path / "models.toml"
        models.write_text('[models.e]\nbackend = "echo"\npath = "unused.gguf"\nreply = "hello"\n')
        catalog = load_catalog(models)
        backend = open_backend(catalog, catalog.get("e"), parallel=1)
        assert isinstance(backend, ScriptedBackend) and backend.name == "e"
        assert backend.respond(GenerationRequest(messages=[Message(role="user", content="hi")])) == "hello"
        assert set(backend_registry.backend_names()) >= {"llama_cpp", "transformers", "vllm", "echo"}
        for body, refused, readers in (
            ('backend = "llama_cpp"\npath = "m.gguf"\nreply = "hello"', "reply", "echo"),
            ('backend = "echo"\npath = "m.gguf"\nexact_kv = true', "exact_kv", "llama_cpp"),
        ):
            models.write_text(f"[models.e]\n{body}\n")
            with pytest.raises(ApplianceError, match=rf"field '{refused}' applies to backend {readers}, not"):
                load_catalog(models)
        models.write_text('[models.e]\nbackend = "echo"\npath = "m.gguf"\nreply = 3\n')
        with pytest.raises(ApplianceError, match="field 'reply'"):
            load_catalog(models)
        with pytest.raises(ApplianceError, match="backend 'echo' is declared twice"):
            backend_registry.declare_backend(backend_registry.BackendDeclaration("echo", print))
    finally:
        backend_registry.forget_backend("echo")


def test_backends_are_known_by_name_and_imported_only_when_opened() -> None:
    """Loading the catalog checks every entry's backend and its options by the backend's declaration: no
    backend module or library is imported. The first opener asked for imports its own module only."""
    statement = (
        "import sys; from appliance.catalog.models import load_catalog; load_catalog('models.toml'); "
        "assert not [m for m in sys.modules if m.endswith('_backend')], 'the catalog loaded a backend'; "
        "from appliance.catalog.backends import backend_names, backend_opener, hosts_adapters; "
        "names = backend_names(); hosts_adapters('transformers'); "
        "heavy = [m for m in ('llama_cpp', 'torch', 'vllm', 'transformers') if m in sys.modules]; "
        "backend_opener('llama_cpp'); "
        "print(names, heavy, 'llama_cpp' in sys.modules, 'appliance.engine.transformers_backend' in sys.modules, "
        "sep='|')"
    )
    shown = subprocess.run([sys.executable, "-c", statement], cwd=REPO, capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "['llama_cpp', 'transformers', 'vllm']|[]|True|False", shown.stdout


def test_a_backend_whose_package_is_missing_or_old_is_one_line_and_the_others_still_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_find_spec, real_version = importlib.util.find_spec, importlib.metadata.version

    def without_vllm(name: str, *args: Any) -> Any:
        return None if name == "vllm" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_vllm)
    monkeypatch.delitem(backend_registry._OPENERS, "vllm", raising=False)
    for _ in range(2):  # the same line every time, not a registry emptied by the first failure
        with pytest.raises(ApplianceError, match=r"^backend 'vllm' needs the Python package 'vllm', not installed"):
            backend_registry.backend_opener("vllm")
    assert backend_registry.backend_opener("llama_cpp") is not None
    with pytest.raises(ApplianceError, match=r"unknown backend 'nope' \(known: llama_cpp, transformers, vllm"):
        backend_registry.backend_opener("nope")

    def old_transformers(distribution: str) -> str:
        return "4.30.2" if distribution == "transformers" else real_version(distribution)

    monkeypatch.setattr(importlib.metadata, "version", old_transformers)
    monkeypatch.delitem(backend_registry._OPENERS, "transformers", raising=False)
    if real_find_spec("torch") is None:
        pytest.skip("torch is not installed here, so the version check of transformers is not reached")
    with pytest.raises(
        ApplianceError, match=r"^backend 'transformers' needs transformers >= 4\.45, found 4\.30\.2: pip"
    ):
        backend_registry.backend_opener("transformers")


def test_each_backend_declares_the_lower_bounds_pyproject_pins() -> None:
    """A declaration's minimum versions are the project's own: where pyproject.toml gives a lower bound
    (>= or ==) for a distribution a backend needs, the declaration names the same version."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lists = [project["dependencies"], *project["optional-dependencies"].values()]
    bounds: dict[str, set[str]] = {}
    for requirement in (line for group in lists for line in group):
        found = re.match(r"([A-Za-z0-9_.-]+)\s*(?:\[[^]]*\])?\s*[^;]*?(?:==|>=)\s*([0-9][0-9.]*)", requirement)
        if found:
            bounds.setdefault(found.group(1).lower(), set()).add(found.group(2))
    checked = 0
    for name in ("llama_cpp", "transformers", "vllm"):
        for requirement in backend_registry.declaration(name).requires:
            pinned = {bound for d in requirement.distributions for bound in bounds.get(d, set())}
            if requirement.minimum:
                assert requirement.minimum in pinned, (name, requirement, pinned)
                checked += 1
    assert checked >= 7


def every_import_graph() -> dict[str, set[str]]:
    """Module -> the appliance modules it imports anywhere: at module level, in functions, for typing."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                module = node.module
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]
            else:
                continue
            graph[name] |= {target for target in targets if target in known and target != name}
    return graph


def test_no_cycle_even_through_imports_inside_functions_or_for_typing() -> None:
    assert cycles(every_import_graph()) == []


#: where ":" may be split: the scenario spec's parser, and the "key: value" lines of /proc/cpuinfo and /proc/self/cgroup
SPLITTING_ALLOWED = {"appliance/scenario_spec.py", "appliance/bench/machine.py", "appliance/sandbox/cgroups.py"}


def test_scenario_specs_and_episode_ids_are_parsed_in_one_place() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("partition", "rpartition", "split", "rsplit")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == ":"
                and relative not in SPLITTING_ALLOWED
            ):
                offenders.append(f"{relative}:{node.lineno}")
    assert offenders == []


def test_no_sql_text_outside_the_store() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_one_pool_builds_schedulers() -> None:
    """The model-session lifecycle is written once: only the pool constructs a scheduler."""
    builders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Scheduler":
                builders.append(str(path.relative_to(REPO)))
    assert builders == ["appliance/episodes/pool.py"]


IMPORTED = "import sys; {statement}; print(sorted(m for m in sys.modules if m.startswith('appliance')))"


def loaded_after(statement: str) -> list[str]:
    command = [sys.executable, "-c", IMPORTED.format(statement=statement)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120, check=True)
    loaded: list[str] = json.loads(result.stdout.replace("'", '"'))
    return loaded


def test_the_package_face_is_lazy_and_imports_no_family() -> None:
    assert loaded_after("import appliance") == ["appliance"]
    assert loaded_after("import appliance.errors") == ["appliance", "appliance.errors"]
    import appliance

    exports = appliance._EXPORTS
    assert sorted(appliance.__all__) == sorted(exports)
    for name, module in exports.items():  # every name resolves, to the object its module defines
        assert getattr(appliance, name) is getattr(__import__(module, fromlist=[name]), name), name
    authoring = loaded_after("import appliance; appliance.ScenarioFamily; appliance.EpisodeContext")
    families = {path.name for path in (PACKAGE / "scenarios").iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert not [m for m in authoring if m.split(".")[2:3] and m.split(".")[2] in families]


OBSERVED = """
import os, runpy, sys
OFFLINE = "HF_HUB_OFFLINE"
seen = []

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name.startswith("appliance"):
            seen.append((name, os.environ.get(OFFLINE) == "1"))
        return None

os.environ.pop(OFFLINE, None)
sys.meta_path.insert(0, Watch())
sys.argv = ["appliance", "--help"]
try:
    runpy.run_module("appliance", run_name="__main__")
except SystemExit:
    pass
print(repr(seen))
"""


def test_offline_is_enforced_before_the_package_loads_anything_else() -> None:
    """Observed, not assumed: every appliance module the CLI imports starts after the variables are set,
    except the entry itself and the module that sets them."""
    result = subprocess.run([sys.executable, "-c", OBSERVED], capture_output=True, text=True, cwd=REPO, timeout=120)
    seen: list[tuple[str, bool]] = eval(result.stdout.strip().splitlines()[-1])
    before = list(dict.fromkeys(name for name, offline in seen if not offline))
    assert before == ["appliance", "appliance.__main__", "appliance.offline"], before
    assert len(seen) > 20 and all(offline for name, offline in seen if name not in before)


def _modules_after(statement: str, *arguments: str) -> list[str]:
    """The modules a fresh interpreter holds after `statement`, in the order they were loaded."""
    script = f"import sys; sys.argv[1:] = {list(arguments)!r}; {statement}; print(' '.join(sys.modules))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


ENGINE_LIBRARIES = ("llama_cpp", "torch", "vllm", "transformers")


def test_reading_a_store_loads_no_engine() -> None:
    """The store, its repair and the CLI of a reading command import duckdb and no engine library."""
    for statement, arguments in [
        ("import appliance.store", ()),
        ("import appliance.store.repair", ()),
        ("import appliance.store.run_view", ()),
        ("import appliance.cli.main", ("report", "--db", "x.duckdb")),
    ]:
        loaded = _modules_after(statement, *arguments)
        assert "duckdb" in loaded, statement
        assert [name for name in ENGINE_LIBRARIES if name in loaded] == [], statement


def test_duckdb_is_imported_in_one_place_and_after_llama_cpp_where_models_load() -> None:
    """A CUDA build of llama.cpp segfaults loading a model in a process that imported duckdb first (seen on
    an H200): duckdb is imported by the store's one module, and what loads models (the CLI's model
    commands, the package's exports that reach the store) loads llama_cpp before it."""
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if "duckdb" in names or (isinstance(node, ast.ImportFrom) and node.module == "duckdb"):
                importers.append(str(path.relative_to(REPO)))
    assert importers == ["appliance/store/database.py"]
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed: nothing to load first")

    def llama_first(loaded: list[str]) -> bool:
        return "duckdb" not in loaded or ("llama_cpp" in loaded and loaded.index("llama_cpp") < loaded.index("duckdb"))

    for command in ("run", "score", "calibrate", "bench", "models"):
        loaded = _modules_after("import appliance.cli.main", command, "--help")
        assert "duckdb" in loaded and llama_first(loaded), command
    import appliance

    one_name_per_module = {appliance._EXPORTS[name]: name for name in appliance.__all__}
    for name in one_name_per_module.values():
        assert llama_first(_modules_after(f"from appliance import {name}")), name


def test_every_script_under_bench_results_imports_names_that_exist() -> None:
    """The scripts there run on lent GPU machines, away from this suite: each name they import from the
    package must still be where they import it from (variants.py once imported PRESETS from a module
    that no longer held it)."""
    scripts = sorted((REPO / "bench_results").rglob("*.py"))
    assert scripts, "no scripts found under bench_results/"
    missing = []
    for script in scripts:
        for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "appliance":
                module = importlib.import_module(node.module)
                missing += [f"{script.name}: {node.module}.{a.name}" for a in node.names if not hasattr(module, a.name)]
    assert missing == []
