"""Binding roles to models, and opening backends: shared by runs, rescoring and calibration.

It sits below the runner and calibration so that neither imports the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from appliance.catalog.models import Catalog, ModelSpec
from appliance.catalog.sampling import Sampling
from appliance.engine.backend import Backend
from appliance.episodes.client import RoleBinding
from appliance.episodes.context import table_role
from appliance.run_config import SupportRole


class BackendFactory(Protocol):
    def __call__(self, catalog: Catalog, spec: ModelSpec, *, parallel: int) -> Backend: ...


def bind_role(catalog: Catalog, model: str, role: str) -> RoleBinding:
    """A role played by `model`, with its sampling defaults and per-role overrides from models.toml."""
    spec = catalog.get(model)
    return RoleBinding(model=model, model_sampling=spec.sampling, role_override=spec.roles.get(role, Sampling()))


def episode_roles(
    catalog: Catalog,
    player: str,
    partner: str,
    support: Mapping[SupportRole, str],
    judges: Iterable[str],
    table: Iterable[str] = (),
) -> dict[str, RoleBinding]:
    """Every role of an episode: player and partner, the support roles, one `judge:NAME` per judge,
    and one seat role per model of an N-player game's `table`."""
    roles = {"player": bind_role(catalog, player, "player"), "partner": bind_role(catalog, partner, "player")}
    roles |= {table_role(model): bind_role(catalog, model, "player") for model in table}
    roles |= {role: bind_role(catalog, model, role) for role, model in support.items()}
    roles |= {f"judge:{judge}": bind_role(catalog, judge, "judge") for judge in judges}
    return roles
