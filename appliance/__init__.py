"""Offline LLM evaluation appliance.

Data flow: CLI -> plan -> runner -> pool (scheduler -> backends) -> store. The names below are the
authoring API, what a family, judge or backend author uses; each is imported from its module on
first use, so `import appliance` (or any one module of it) loads nothing else and no family.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    "ApplianceError": "appliance.errors",
    "Backend": "appliance.engine.backend",
    "BackendCounters": "appliance.engine.backend",
    "Completion": "appliance.engine.types",
    "GenerationRequest": "appliance.engine.types",
    "Message": "appliance.engine.types",
    "ResolvedSampling": "appliance.engine.types",
    "Sampling": "appliance.catalog.sampling",
    "ScoringRequest": "appliance.engine.types",
    "ScoredText": "appliance.engine.types",
    "TokenScores": "appliance.engine.types",
    "ScriptedBackend": "appliance.engine.scripted",
    "Catalog": "appliance.catalog.models",
    "ModelSpec": "appliance.catalog.models",
    "load_catalog": "appliance.catalog.models",
    "ModelClient": "appliance.episodes.client",
    "RoleBinding": "appliance.episodes.client",
    "EpisodeFailed": "appliance.episodes.client",
    "EpisodeContext": "appliance.episodes.context",
    "EpisodeKey": "appliance.episodes.context",
    "ModelPool": "appliance.episodes.pool",
    "RunConfig": "appliance.run_config",
    "RunRequest": "appliance.run.planning",
    "plan_run": "appliance.run.planning",
    "Runner": "appliance.run.runner",
    "RunSummary": "appliance.run.runner",
    "Instance": "appliance.scenarios.base",
    "ScenarioFamily": "appliance.scenarios.base",
    "JudgedFamily": "appliance.scenarios.base",
    "StagedFamily": "appliance.scenarios.base",
    "Family": "appliance.scenarios.base",
    "RULE_SCORER": "appliance.scenarios.base",
    "ScenarioSpec": "appliance.scenario_spec",
    "FamilyEntry": "appliance.scenarios.registry",
    "LoadRequest": "appliance.scenarios.registry",
    "Importer": "appliance.scenarios.registry",
    "ImportRequest": "appliance.scenarios.registry",
    "GenerateRequest": "appliance.scenarios.registry",
    "register_family": "appliance.scenarios.registry",
    "load_family": "appliance.scenarios.registry",
    "RunView": "appliance.store.run_view",
    "Store": "appliance.store.store",
    "Panel": "appliance.catalog.panels",
    "JudgeTemplate": "appliance.judging.templates",
    "RatingTemplate": "appliance.judging.templates",
    "LikertTemplate": "appliance.judging.templates",
    "PairwiseTemplate": "appliance.judging.templates",
    "YesNoTemplate": "appliance.judging.templates",
    "load_judge_template": "appliance.judging.templates",
    "ask_judge": "appliance.judging.verdicts",
    "judge_pair": "appliance.judging.verdicts",
    "scoring_features": "appliance.judging.scoring",
    "SandboxLimits": "appliance.sandbox.limits",
    "TestCase": "appliance.sandbox.cases",
    "run_tests": "appliance.sandbox.run",
}

__all__ = [
    "RULE_SCORER",
    "ApplianceError",
    "Backend",
    "BackendCounters",
    "Catalog",
    "Completion",
    "EpisodeContext",
    "EpisodeFailed",
    "EpisodeKey",
    "Family",
    "FamilyEntry",
    "GenerateRequest",
    "GenerationRequest",
    "ImportRequest",
    "Importer",
    "Instance",
    "JudgeTemplate",
    "JudgedFamily",
    "LikertTemplate",
    "LoadRequest",
    "Message",
    "ModelClient",
    "ModelPool",
    "ModelSpec",
    "PairwiseTemplate",
    "Panel",
    "RatingTemplate",
    "ResolvedSampling",
    "RoleBinding",
    "RunConfig",
    "RunRequest",
    "RunSummary",
    "RunView",
    "Runner",
    "Sampling",
    "SandboxLimits",
    "ScenarioFamily",
    "ScenarioSpec",
    "ScoredText",
    "ScoringRequest",
    "ScriptedBackend",
    "StagedFamily",
    "Store",
    "TestCase",
    "TokenScores",
    "YesNoTemplate",
    "ask_judge",
    "judge_pair",
    "load_catalog",
    "load_family",
    "load_judge_template",
    "plan_run",
    "register_family",
    "run_tests",
    "scoring_features",
]


#: the modules above that import the store, and with it duckdb: llama.cpp is loaded before them, since a
#: CUDA build of it cannot load a model in a process that loaded duckdb first (`engine/load_order.py`)
_REACH_THE_STORE = frozenset(
    {
        "appliance.episodes.context",
        "appliance.episodes.pool",
        "appliance.judging.verdicts",
        "appliance.run.planning",
        "appliance.run.runner",
        "appliance.scenarios.base",
        "appliance.scenarios.registry",
        "appliance.scenario_spec",
        "appliance.store.run_view",
        "appliance.store.store",
    }
)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'appliance' has no attribute '{name}'")
    if module in _REACH_THE_STORE:
        from appliance.engine.load_order import load_llama_first

        load_llama_first()
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:
    from appliance.catalog.models import Catalog, ModelSpec, load_catalog
    from appliance.catalog.panels import Panel
    from appliance.catalog.sampling import Sampling
    from appliance.engine.backend import Backend, BackendCounters
    from appliance.engine.scripted import ScriptedBackend
    from appliance.engine.types import (
        Completion,
        GenerationRequest,
        Message,
        ResolvedSampling,
        ScoredText,
        ScoringRequest,
        TokenScores,
    )
    from appliance.episodes.client import EpisodeFailed, ModelClient, RoleBinding
    from appliance.episodes.context import EpisodeContext, EpisodeKey
    from appliance.episodes.pool import ModelPool
    from appliance.errors import ApplianceError
    from appliance.judging.scoring import scoring_features
    from appliance.judging.templates import (
        JudgeTemplate,
        LikertTemplate,
        PairwiseTemplate,
        RatingTemplate,
        YesNoTemplate,
        load_judge_template,
    )
    from appliance.judging.verdicts import ask_judge, judge_pair
    from appliance.run.planning import RunRequest, plan_run
    from appliance.run.runner import Runner, RunSummary
    from appliance.run_config import RunConfig
    from appliance.sandbox.cases import TestCase
    from appliance.sandbox.limits import SandboxLimits
    from appliance.sandbox.run import run_tests
    from appliance.scenario_spec import ScenarioSpec
    from appliance.scenarios.base import RULE_SCORER, Family, Instance, JudgedFamily, ScenarioFamily, StagedFamily
    from appliance.scenarios.registry import (
        FamilyEntry,
        GenerateRequest,
        Importer,
        ImportRequest,
        LoadRequest,
        load_family,
        register_family,
    )
    from appliance.store.run_view import RunView
    from appliance.store.store import Store
