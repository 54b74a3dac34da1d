"""clembench: dialogue games under a programmatic game master, registered in one place.

Each game is one module of this package that registers a `games.Game` record.
"""

from __future__ import annotations

from appliance.errors import ApplianceError
from appliance.scenarios.clembench.family import DESCRIPTION, ClembenchFamily, load_clembench
from appliance.scenarios.clembench.games import variant_names
from appliance.scenarios.clembench.generate import generate_instance_set
from appliance.scenarios.clembench.headline import clembench_headline
from appliance.scenarios.clembench.instance_sets import save_instance_set
from appliance.scenarios.clembench.published import read_published
from appliance.scenarios.clembench.render import print_clem_report
from appliance.scenarios.clembench.report import MIN_EPISODES_PER_ROW, ClemReport, build_clem_report
from appliance.scenarios.clembench.results import import_results
from appliance.scenarios.registry import (
    FamilyEntry,
    GenerateRequest,
    Importer,
    ImportRequest,
    LoadRequest,
    register_family,
)
from appliance.store import Store


def load(request: LoadRequest) -> ClembenchFamily:
    return load_clembench(request.spec, request.source, request.data_folder, seed=request.seed, store=request.store)


def import_instances(request: ImportRequest) -> list[str]:
    instance_set = read_published(request.path, ENTRY.folder())
    if request.name is not None:
        instance_set.name = request.name
    return save_instance_set(instance_set, request.out, request.db)


def import_scores(request: ImportRequest) -> list[str]:
    with Store.open(request.db) as store:
        run_id, episodes, new = import_results(store, request.path)
    state = "imported" if new else "already imported"
    return [f"{state}: {episodes} episodes as run {run_id}; see them with: appliance report {run_id}"]


def generate(request: GenerateRequest) -> list[str]:
    instance_set = generate_instance_set(ENTRY.folder(), request.seed, request.per_experiment)
    if request.games:
        known = variant_names()
        unknown = [game for game in request.games if game not in known]
        if unknown:
            raise ApplianceError(f"--games: unknown game '{unknown[0]}' (known: {', '.join(known)})")
        instance_set.instances = [i for i in instance_set.instances if i.game in request.games]
    if request.name is not None:
        instance_set.name = request.name
    return save_instance_set(instance_set, request.out, request.db)


ENTRY = register_family(
    FamilyEntry[ClemReport](
        name="clembench",
        description=DESCRIPTION,
        load=load,
        report=build_clem_report,
        render=print_clem_report,
        limit_unit="episodes per game",
        quick_limit=1,
        default_limit=MIN_EPISODES_PER_ROW,
        importers=(
            Importer(
                kind="clembench-instances",
                help="Store clembench's published instances as an instance set, to play as they are.",
                path_help="a clembench instances.json, or a folder of <game>/instances.json",
                run=import_instances,
                options=frozenset({"out", "name", "db"}),
            ),
            Importer(
                kind="clembench-results",
                help="Import clembench results as a run; `appliance report RUN` aggregates them like our own.",
                path_help="a folder or zip of clembench per-episode scores.json files",
                run=import_scores,
            ),
        ),
        generate=generate,
        order=20,
        headline=clembench_headline,
    )
)

__all__ = ["ENTRY", "ClembenchFamily"]
