"""SimulBench: a user agent drives simulation tasks; scripts are extracted and judged. Registered in one place."""

from __future__ import annotations

from collections import Counter
from typing import Any

from appliance.scenarios.registry import FamilyEntry, Importer, ImportRequest, LoadRequest, register_family
from appliance.scenarios.simulbench.family import DESCRIPTION, SimulBenchFamily, load_simulbench
from appliance.scenarios.simulbench.headline import simulbench_headline
from appliance.scenarios.simulbench.render import print_simulbench_report
from appliance.scenarios.simulbench.report import SimulBenchReport, build_simulbench_report
from appliance.scenarios.simulbench.scripts import read_published_scripts
from appliance.scenarios.simulbench.tasks import read_published_tasks
from appliance.store import Store
from appliance.store.instance_sets import write_instance_set


def load(request: LoadRequest) -> SimulBenchFamily:
    return load_simulbench(
        request.spec, request.source, request.data_folder, request.judges_folder, store=request.store
    )


def _store_set(request: ImportRequest, name: str, count: int, payload: dict[str, Any], what: str) -> list[str]:
    with Store.open(request.db) as store:
        new = write_instance_set(
            store, name=name, family="simulbench", source=str(request.path), seed=None, count=count, payload=payload
        )
    return [
        f"{'stored' if new else 'already stored:'} {count} {what} as '{name}'",
        f"run them with: appliance run --scenario simulbench:{name} --limit 5",
    ]


def import_tasks(request: ImportRequest) -> list[str]:
    name = request.name or "simulbench-tasks"
    task_set = read_published_tasks(request.path).model_copy(update={"name": name})
    return _store_set(request, name, len(task_set.tasks), task_set.model_dump(mode="json"), "tasks")


def import_scripts(request: ImportRequest) -> list[str]:
    name = request.name or "simulbench-scripts"
    script_set = read_published_scripts(request.path).model_copy(update={"name": name})
    kinds = Counter(script.kind for script in script_set.scripts)
    summary = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))
    payload = script_set.model_dump(mode="json")
    return _store_set(request, name, len(script_set.scripts), payload, f"scripts ({summary})")


ENTRY = register_family(
    FamilyEntry[SimulBenchReport](
        name="simulbench",
        description=DESCRIPTION,
        load=load,
        report=build_simulbench_report,
        render=print_simulbench_report,
        quick_limit=1,
        quick_turns=2,
        importers=(
            Importer(
                kind="simulbench-tasks",
                help="Store SimulBench's published tasks; run all stages on them with --scenario simulbench:NAME.",
                path_help="SimulBench's simulbench_tasks.jsonl",
                run=import_tasks,
                options=frozenset({"name", "db"}),
            ),
            Importer(
                kind="simulbench-scripts",
                help="Store SimulBench's published test scripts; evaluate them with --scenario simulbench:NAME.",
                path_help="SimulBench's simulbench_all.jsonl (test scripts)",
                run=import_scripts,
                options=frozenset({"name", "db"}),
            ),
        ),
        order=30,
        headline=simulbench_headline,
    )
)
