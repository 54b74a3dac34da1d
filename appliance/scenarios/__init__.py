"""Scenario families: each is one package here that registers itself (see `registry`)."""

from appliance.scenarios.base import Family, Instance, JudgedFamily, ScenarioFamily, StagedFamily
from appliance.scenarios.registry import (
    FamilyEntry,
    GenerateRequest,
    Importer,
    ImportRequest,
    LoadRequest,
    ScenarioReport,
    build_scenario_report,
    family_entry,
    family_names,
    load_family,
    load_run_family,
    register_family,
)

__all__ = [
    "Family",
    "FamilyEntry",
    "GenerateRequest",
    "ImportRequest",
    "Importer",
    "Instance",
    "JudgedFamily",
    "LoadRequest",
    "ScenarioFamily",
    "ScenarioReport",
    "StagedFamily",
    "build_scenario_report",
    "family_entry",
    "family_names",
    "load_family",
    "load_run_family",
    "register_family",
]
