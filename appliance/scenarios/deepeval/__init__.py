"""DeepEval: models under test interact through a referee's message pool, in synchronous rounds.

Registered in one place: loader, payoff report and its renderer.
"""

from __future__ import annotations

from appliance.scenarios.deepeval.family import DESCRIPTION, DeepEvalData, DeepEvalFamily
from appliance.scenarios.deepeval.headline import deepeval_headline
from appliance.scenarios.deepeval.render import print_deepeval_report
from appliance.scenarios.deepeval.report import DeepEvalReport, build_deepeval_report
from appliance.scenarios.registry import FamilyEntry, LoadRequest, register_family


def load(request: LoadRequest) -> DeepEvalFamily:
    """`deepeval` (our data) or `deepeval:FOLDER`, a folder with the same files (e.g. other problems)."""
    return DeepEvalFamily(request.spec, DeepEvalData(request.folder(), request.judges_folder, request.seed))


ENTRY = register_family(
    FamilyEntry[DeepEvalReport](
        name="deepeval",
        description=DESCRIPTION,
        load=load,
        report=build_deepeval_report,
        render=print_deepeval_report,
        limit_unit="repetitions per task",
        quick_limit=1,
        quick_turns=2,
        order=40,
        headline=deepeval_headline,
    )
)
