"""A run's configuration: everything that decides what a run does, stored with the run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from appliance.catalog.panels import Panel
from appliance.scenario_spec import family_of
from appliance.sharding import Shard

#: roles other than "player", "partner" and the judges that a family may need a model for
SupportRole = Literal["interrogator", "user_agent", "simulator"]


#: where runs stored before `RunConfig.families` kept a family's snapshot (by scenario) and its options (by
#: family name): read, never written
OLD_SNAPSHOTS_KEY, OLD_OPTIONS_KEY = "family_settings", "family_options"


class FamilySettings(BaseModel):
    """A family's own settings in one run, kept together: what the user set for it and what it resolved.

    Both are stored with the run: `--resume`, shards and rescoring load the family with the same options,
    and its report reads the snapshot, not the family's files as they are later.
    """

    model_config = ConfigDict(extra="forbid")

    #: its options as `--set NAME.KEY=VALUE` gave them (only the keys given), checked by its options model
    options: dict[str, Any] = Field(default_factory=dict)
    #: what the family resolved when the run started (its `settings_snapshot()`, e.g. deepeval.toml as played)
    snapshot: dict[str, Any] = Field(default_factory=dict)


def stored_family_settings(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The `families` of a stored config, of either shape. A run stored before they were one field kept
    each scenario's snapshot under `family_settings` and the options under `family_options`, by family
    name, which hold for every scenario of that family."""
    families = {str(spec): dict(value) for spec, value in (config.get("families") or {}).items()}
    for spec, snapshot in (config.get(OLD_SNAPSHOTS_KEY) or {}).items():
        families.setdefault(str(spec), {})["snapshot"] = snapshot
    for name, options in (config.get(OLD_OPTIONS_KEY) or {}).items():
        for spec in config.get("scenarios") or []:
            if family_of(str(spec)) == name:
                families.setdefault(str(spec), {})["options"] = options
    return families


class RunConfig(BaseModel):
    """Everything that decides what a run does; stored with the run."""

    model_config = ConfigDict(extra="forbid")

    scenarios: list[str]
    players: list[str] = Field(min_length=1)
    interrogator: str
    panel: Panel
    seed: int = 0
    limit: int | None = Field(default=None, ge=1)
    #: per-family instance limits (the quick suite's, or a family's own default); a family not named here
    #: uses `limit`
    limits: dict[str, int] = Field(default_factory=dict)
    #: the quick suite (`appliance run` with no --scenario): its limits and turn caps shorten the methods
    quick: bool = False
    #: per-family turn caps (the quick suite's); a family not named here uses `turns`
    turn_caps: dict[str, int] = Field(default_factory=dict)
    #: per-family caps on a reply's tokens (the quick suite's); a family not named here keeps its own
    reply_caps: dict[str, int] = Field(default_factory=dict)
    parallel: int = Field(default=8, ge=1)
    models_file: str
    greedy: bool = False
    turns: int | None = Field(default=None, ge=1)
    #: two-player games also pair every player with every other one, in both roles
    cross_play: bool = False
    #: a judge's verdicts on its own model's outputs are left out (families that rate players' outputs)
    exclude_self_judging: bool = False
    #: the fixed model that answers SimulBench's user agent while dialogues are collected (required for SimulBench)
    simulator: str | None = None
    #: model-written code may run without kernel isolation (--unsafe-code-execution; reports say so)
    unsafe_code_execution: bool = False
    #: family -> calibration id applied to its verdicts (chosen when the run starts)
    calibrations: dict[str, str] = Field(default_factory=dict)
    #: scenario -> its family's own settings: the options set for it (when the run is planned) and the
    #: snapshot of what it resolved (when the run starts); a scenario with neither is absent
    families: dict[str, FamilySettings] = Field(default_factory=dict)
    #: "I/N": this run plays shard I of N of the plan (`appliance.sharding`); `appliance merge` joins them
    shard: str | None = None
    #: the Ray cluster the run started on (`appliance.cluster.ray_cluster`), None in one process; not part of the plan
    cluster: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _read_the_older_shape(cls, data: Any) -> Any:
        """A config stored before `families` (its two older keys) loads as the same config would now."""
        if isinstance(data, Mapping) and (OLD_SNAPSHOTS_KEY in data or OLD_OPTIONS_KEY in data):
            rest = {key: value for key, value in data.items() if key not in (OLD_SNAPSHOTS_KEY, OLD_OPTIONS_KEY)}
            return rest | {"families": stored_family_settings(data)}
        return data

    @field_validator("shard")
    @classmethod
    def _valid_shard(cls, value: str | None) -> str | None:
        return None if value is None else str(Shard.parse(value))

    def family_settings(self, scenario: str) -> FamilySettings:
        """The own settings of the family playing `scenario` (empty where the run holds none)."""
        return self.families.get(scenario, FamilySettings())

    def shard_of_plan(self) -> Shard | None:
        return None if self.shard is None else Shard.parse(self.shard)

    def plan_fields(self) -> dict[str, Any]:
        """What every shard of one plan stores alike: the config less the shard, and less the models
        file's path (shards may run on machines with other checkouts; its content is hashed with the run)."""
        return self.model_dump(mode="json", exclude={"shard", "models_file", "cluster"})

    def support_models(self) -> dict[SupportRole, str]:
        """The model bound to each support role. The user agent is the run's model playing the user.

        SimulBench's simulator is a fixed model named by the run (or models.toml), never a player by
        default: it is absent here until one is named.
        """
        roles: dict[SupportRole, str] = {"interrogator": self.interrogator, "user_agent": self.interrogator}
        if self.simulator is not None:
            roles["simulator"] = self.simulator
        return roles

    def role_models(self) -> list[str]:
        """Every model the config names for a role: players, support roles and judges."""
        return [*self.players, *self.support_models().values(), *self.panel.judges]
