"""SimulateBench: consistency and robustness on character profiles, registered in one place."""

from __future__ import annotations

from pathlib import Path

from appliance.scenarios.registry import FamilyEntry, Importer, ImportRequest, LoadRequest, register_family
from appliance.scenarios.simulatebench.family import DESCRIPTION, SimulateBenchFamily
from appliance.scenarios.simulatebench.headline import simulatebench_headline
from appliance.scenarios.simulatebench.importer import import_simulatebench
from appliance.scenarios.simulatebench.render import print_consistency
from appliance.scenarios.simulatebench.report import ConsistencyReport, build_consistency_report
from appliance.scenarios.simulatebench.results import import_published_answers
from appliance.store import Store


def load(request: LoadRequest) -> SimulateBenchFamily:
    """`simulatebench` plays our profiles; `simulatebench:FOLDER` an imported folder."""
    data = request.folder()
    return SimulateBenchFamily.load(data, prompts_folder=request.data_folder, spec=request.spec)


def import_profiles(request: ImportRequest) -> list[str]:
    out = request.out or Path("imported/simulatebench")
    profiles, questions, skipped = import_simulatebench(request.path, out)
    return [
        f"imported {profiles} profiles with {questions} single-choice questions into {out} "
        f"({skipped} questions skipped: open questions or a gold answer that is not an option)",
        f"run them with: appliance run --scenario simulatebench:{out} --limit 3",
    ]


def import_results(request: ImportRequest) -> list[str]:
    with Store.open(request.db) as store:
        run_id, episodes, new = import_published_answers(store, request.path)
    state = "imported" if new else "already imported"
    return [
        f"{state}: {episodes} episodes (model x character) of the authors' few-shot prompt 1 answers as run {run_id}",
        f"see CA and RCoV with: appliance report {run_id}",
    ]


ENTRY = register_family(
    FamilyEntry[ConsistencyReport](
        name="simulatebench",
        description=DESCRIPTION,
        load=load,
        report=build_consistency_report,
        render=print_consistency,
        limit_unit="profiles per character",
        quick_limit=1,
        importers=(
            Importer(
                kind="simulatebench",
                help="Convert SimulateBench's profiles, questions and perturbation variants; "
                "run with --scenario simulatebench:OUT.",
                path_help="SimulateBench's db folder (profile/ and benchmark_only_QA/)",
                run=import_profiles,
                options=frozenset({"out"}),
            ),
            Importer(
                kind="simulatebench-results",
                help="Import SimulateBench's published per-question answers as a run, scored with the authors' test.",
                path_help="SimulateBench's db/benchmark folder (published answers)",
                run=import_results,
            ),
        ),
        order=10,
        headline=simulatebench_headline,
    )
)
