"""Offline LLM evaluation appliance.

Data flow: runner -> episodes -> scheduler -> backends -> store. The public
API below is what scenario authors and scripts use; the CLI is built on it.
"""

from appliance.calibration.features import FeatureCalibration, fit_feature_calibration
from appliance.calibration.pipeline import CalibrationRequest, run_calibration
from appliance.catalog import Catalog, ModelSpec, load_catalog
from appliance.client import EpisodeFailed, RoleBinding
from appliance.engine.backend import Backend, BackendCounters
from appliance.engine.scripted import ScriptedBackend
from appliance.engine.synthetic import SyntheticShape
from appliance.engine.types import (
    Completion,
    GenerationRequest,
    Message,
    ResolvedSampling,
    Sampling,
    ScoringRequest,
    TokenScores,
)
from appliance.episodes import EpisodeContext
from appliance.errors import ApplianceError
from appliance.judging.panels import Panel, load_panels
from appliance.judging.scoring import scoring_features
from appliance.judging.scoring_templates import ExpectedScoreTemplate, LikelihoodTemplate
from appliance.judging.templates import (
    JudgeTemplate,
    LikertTemplate,
    PairwiseTemplate,
    RatingTemplate,
    YesNoTemplate,
    load_judge_template,
)
from appliance.judging.verdicts import PairVerdict, ask_judge, judge_pair
from appliance.labels import LabelSet, read_labels
from appliance.rescoring import rescore_run
from appliance.roles import BackendFactory, bind_role
from appliance.run_config import RunConfig
from appliance.runner import Runner, RunSummary
from appliance.scenarios import (
    Family,
    FamilyEntry,
    GenerateRequest,
    Importer,
    ImportRequest,
    Instance,
    JudgedFamily,
    LoadRequest,
    ScenarioFamily,
    ScenarioReport,
    StagedFamily,
    build_scenario_report,
    family_entry,
    family_names,
    load_family,
    register_family,
)
from appliance.scenarios.base import RULE_SCORER
from appliance.scenarios.clembench.family import ClembenchFamily
from appliance.scenarios.clembench.games import Game, register_game
from appliance.scenarios.clembench.master import GameTable, Outcome, Seat
from appliance.scenarios.clembench.report import ClemReport, build_clem_report
from appliance.scenarios.deepeval.family import DeepEvalFamily
from appliance.scenarios.deepeval.referee import Referee
from appliance.scenarios.deepeval.report import DeepEvalReport, build_deepeval_report
from appliance.scenarios.pingpong.family import PingPongFamily
from appliance.scenarios.pingpong.report import PingPongLeaderboard, build_leaderboard
from appliance.scenarios.simulatebench.family import SimulateBenchFamily
from appliance.scenarios.simulatebench.report import ConsistencyReport, build_consistency_report
from appliance.scenarios.simulbench.family import SimulBenchFamily
from appliance.scenarios.simulbench.report import SimulBenchReport, build_simulbench_report
from appliance.scenarios.simulbench.scripts import TestScript
from appliance.scheduler import Scheduler
from appliance.store import Store
from appliance.store.run_view import RunView
from appliance.view import build_view

__version__ = "0.1.0"

__all__ = [
    "RULE_SCORER",
    "ApplianceError",
    "Backend",
    "BackendCounters",
    "BackendFactory",
    "CalibrationRequest",
    "Catalog",
    "ClemReport",
    "ClembenchFamily",
    "Completion",
    "ConsistencyReport",
    "DeepEvalFamily",
    "DeepEvalReport",
    "EpisodeContext",
    "EpisodeFailed",
    "ExpectedScoreTemplate",
    "Family",
    "FamilyEntry",
    "FeatureCalibration",
    "Game",
    "GameTable",
    "GenerateRequest",
    "GenerationRequest",
    "ImportRequest",
    "Importer",
    "Instance",
    "JudgeTemplate",
    "JudgedFamily",
    "LabelSet",
    "LikelihoodTemplate",
    "LikertTemplate",
    "LoadRequest",
    "Message",
    "ModelSpec",
    "Outcome",
    "PairVerdict",
    "PairwiseTemplate",
    "Panel",
    "PingPongFamily",
    "PingPongLeaderboard",
    "RatingTemplate",
    "Referee",
    "ResolvedSampling",
    "RoleBinding",
    "RunConfig",
    "RunSummary",
    "RunView",
    "Runner",
    "Sampling",
    "ScenarioFamily",
    "ScenarioReport",
    "Scheduler",
    "ScoringRequest",
    "ScriptedBackend",
    "Seat",
    "SimulBenchFamily",
    "SimulBenchReport",
    "SimulateBenchFamily",
    "StagedFamily",
    "Store",
    "SyntheticShape",
    "TestScript",
    "TokenScores",
    "YesNoTemplate",
    "ask_judge",
    "bind_role",
    "build_clem_report",
    "build_consistency_report",
    "build_deepeval_report",
    "build_leaderboard",
    "build_scenario_report",
    "build_simulbench_report",
    "build_view",
    "family_entry",
    "family_names",
    "fit_feature_calibration",
    "judge_pair",
    "load_catalog",
    "load_family",
    "load_judge_template",
    "load_panels",
    "read_labels",
    "register_family",
    "register_game",
    "rescore_run",
    "run_calibration",
    "scoring_features",
]
