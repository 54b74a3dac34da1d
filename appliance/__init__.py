"""Offline LLM evaluation appliance.

Data flow: runner -> episodes -> scheduler -> backends -> store. The public
API below is what scenario authors and scripts use; the CLI is built on it.
"""

from appliance.catalog import Catalog, ModelSpec, load_catalog
from appliance.engine.backend import Backend, BackendCounters
from appliance.engine.scripted import ScriptedBackend
from appliance.engine.types import Completion, GenerationRequest, Message, ResolvedSampling, Sampling
from appliance.episodes import EpisodeContext, EpisodeFailed, RoleBinding
from appliance.errors import ApplianceError
from appliance.judging.panels import Panel, load_panels
from appliance.report import Leaderboard, build_leaderboard
from appliance.runner import RunConfig, Runner, RunSummary
from appliance.scenarios import Instance, ScenarioFamily, family_names, load_family
from appliance.scheduler import Scheduler
from appliance.store import Store

__version__ = "0.1.0"

__all__ = [
    "ApplianceError",
    "Backend",
    "BackendCounters",
    "Catalog",
    "Completion",
    "EpisodeContext",
    "EpisodeFailed",
    "GenerationRequest",
    "Instance",
    "Leaderboard",
    "Message",
    "ModelSpec",
    "Panel",
    "ResolvedSampling",
    "RoleBinding",
    "RunConfig",
    "RunSummary",
    "Runner",
    "Sampling",
    "ScenarioFamily",
    "Scheduler",
    "ScriptedBackend",
    "Store",
    "build_leaderboard",
    "family_names",
    "load_catalog",
    "load_family",
    "load_panels",
]
