"""DeepEval: models under test interact through a referee's message pool, in synchronous rounds.

Registered in one place: loader, payoff report and its renderer.
"""

from __future__ import annotations

from appliance.scenarios.deepeval.family import DESCRIPTION, DeepEvalFamily, load_deepeval
from appliance.scenarios.deepeval.render import print_deepeval_report
from appliance.scenarios.deepeval.report import DeepEvalReport, build_deepeval_report
from appliance.scenarios.registry import FamilyEntry, LoadRequest, register_family


def load(request: LoadRequest) -> DeepEvalFamily:
    return load_deepeval(request.spec, request.data_folder, request.judges_folder, seed=request.seed)


ENTRY = register_family(
    FamilyEntry[DeepEvalReport](
        name="deepeval",
        description=DESCRIPTION,
        load=load,
        report=build_deepeval_report,
        render=print_deepeval_report,
        quick_limit=1,
        quick_turns=2,
        order=40,
    )
)
