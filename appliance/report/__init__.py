"""Reports computed from the store, one kind per family, all with bootstrap intervals."""

from appliance.report.clemscore import ClemReport, ClemRow, build_clem_report
from appliance.report.consistency import ConsistencyReport, ConsistencyRow, build_consistency_report
from appliance.report.deepeval import DeepEvalReport, PayoffRow, build_deepeval_report
from appliance.report.leaderboard import Leaderboard, LeaderboardRow, build_leaderboard
from appliance.report.scenario import ScenarioReport, build_scenario_report
from appliance.report.simulbench import SimulReport, build_simulbench_report

__all__ = [
    "ClemReport",
    "ClemRow",
    "ConsistencyReport",
    "ConsistencyRow",
    "DeepEvalReport",
    "Leaderboard",
    "LeaderboardRow",
    "PayoffRow",
    "ScenarioReport",
    "SimulReport",
    "build_clem_report",
    "build_consistency_report",
    "build_deepeval_report",
    "build_leaderboard",
    "build_scenario_report",
    "build_simulbench_report",
]
