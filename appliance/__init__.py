"""Offline LLM evaluation appliance.

Data flow: runner -> episodes -> scheduler -> backends -> store. The public
API below is what scenario authors and scripts use; the CLI is built on it.
"""

from appliance.calibration.pipeline import CalibrationRequest, run_calibration
from appliance.catalog import Catalog, ModelSpec, load_catalog
from appliance.engine.backend import Backend, BackendCounters
from appliance.engine.scripted import ScriptedBackend
from appliance.engine.types import Completion, GenerationRequest, Message, ResolvedSampling, Sampling
from appliance.episodes import EpisodeContext, EpisodeFailed, RoleBinding
from appliance.errors import ApplianceError
from appliance.judging.panels import Panel, load_panels
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
from appliance.report import (
    ClemReport,
    ConsistencyReport,
    DeepEvalReport,
    Leaderboard,
    SimulReport,
    build_clem_report,
    build_deepeval_report,
    build_leaderboard,
    build_scenario_report,
    build_simulbench_report,
)
from appliance.rescoring import rescore_run
from appliance.runner import RunConfig, Runner, RunSummary
from appliance.scenarios import Family, Instance, ScenarioFamily, StagedFamily, family_names, load_family
from appliance.scenarios.clembench.family import ClembenchFamily
from appliance.scenarios.clembench.master import Outcome, Seat, Table
from appliance.scenarios.deepeval.family import DeepEvalFamily
from appliance.scenarios.deepeval.referee import Referee
from appliance.scenarios.simulbench.family import SimulBenchFamily
from appliance.scenarios.simulbench.scripts import TestScript
from appliance.scheduler import Scheduler
from appliance.store import Store

__version__ = "0.1.0"

__all__ = [
    "ApplianceError",
    "Backend",
    "BackendCounters",
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
    "Family",
    "GenerationRequest",
    "Instance",
    "JudgeTemplate",
    "LabelSet",
    "Leaderboard",
    "LikertTemplate",
    "Message",
    "ModelSpec",
    "Outcome",
    "PairVerdict",
    "PairwiseTemplate",
    "Panel",
    "RatingTemplate",
    "Referee",
    "ResolvedSampling",
    "RoleBinding",
    "RunConfig",
    "RunSummary",
    "Runner",
    "Sampling",
    "ScenarioFamily",
    "Scheduler",
    "ScriptedBackend",
    "Seat",
    "SimulBenchFamily",
    "SimulReport",
    "StagedFamily",
    "Store",
    "Table",
    "TestScript",
    "YesNoTemplate",
    "ask_judge",
    "build_clem_report",
    "build_deepeval_report",
    "build_leaderboard",
    "build_scenario_report",
    "build_simulbench_report",
    "family_names",
    "judge_pair",
    "load_catalog",
    "load_family",
    "load_judge_template",
    "load_panels",
    "read_labels",
    "rescore_run",
    "run_calibration",
]
