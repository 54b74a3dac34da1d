"""Scenario families: each turns its data folder into instances and plays episodes."""

from appliance.scenarios.base import Family, Instance, ScenarioFamily, StagedFamily
from appliance.scenarios.registry import family_names, load_family

__all__ = ["Family", "Instance", "ScenarioFamily", "StagedFamily", "family_names", "load_family"]
