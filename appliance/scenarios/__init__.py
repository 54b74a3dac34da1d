"""Scenario families: each turns its data folder into instances and plays episodes."""

from appliance.scenarios.base import Instance, ScenarioFamily
from appliance.scenarios.registry import family_names, load_family

__all__ = ["Instance", "ScenarioFamily", "family_names", "load_family"]
