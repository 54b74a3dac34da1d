"""One report per scenario family of a run: the family decides which kind."""

from __future__ import annotations

from appliance.report.clemscore import ClemReport, build_clem_report
from appliance.report.consistency import ConsistencyReport, build_consistency_report
from appliance.report.deepeval import DeepEvalReport, build_deepeval_report
from appliance.report.leaderboard import Leaderboard, build_leaderboard
from appliance.report.simulbench import SimulReport, build_simulbench_report
from appliance.store import Store

ScenarioReport = Leaderboard | ConsistencyReport | ClemReport | SimulReport | DeepEvalReport


def build_scenario_report(store: Store, run_id: str, scenario: str, panel: str | None = None) -> ScenarioReport:
    family = scenario.partition(":")[0]
    if family == "simulatebench":
        return build_consistency_report(store, run_id, scenario)
    if family == "clembench":
        return build_clem_report(store, run_id, scenario)
    if family == "simulbench":
        return build_simulbench_report(store, run_id, scenario, panel)
    if family == "deepeval":
        return build_deepeval_report(store, run_id, scenario, panel)
    return build_leaderboard(store, run_id, scenario=scenario, panel=panel)
