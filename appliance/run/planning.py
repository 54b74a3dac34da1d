"""Run planning: what the user asked for, turned into the `RunConfig` a run stores and plays.

The policy lives here, not in the CLI: defaults from the catalog (players, interrogator,
simulator), the quick suite (`appliance run` with no --scenario, --limit or --all: every family at
its own quick limit and turn cap), each family's own default limit, and the panel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from appliance.catalog.models import Catalog
from appliance.catalog.panels import get_panel
from appliance.errors import ApplianceError
from appliance.paths import judges_dir
from appliance.run_config import FamilySettings, RunConfig
from appliance.scenario_spec import family_of
from appliance.scenarios.registry import FamilyEntry, family_entry, family_options

#: instances per scenario when one is named without --limit or --all and the family has no default
DEFAULT_LIMIT = 6


@dataclass(frozen=True)
class RunRequest:
    """A run as asked for (the flags of `appliance run`); empty means "the default"."""

    scenarios: list[str] = field(default_factory=list)
    players: list[str] = field(default_factory=list)
    interrogator: str | None = None
    simulator: str | None = None
    turns: int | None = None
    panel: str = "default"
    seed: int = 0
    limit: int | None = None
    all_instances: bool = False
    parallel: int = 8
    cross_play: bool = False
    exclude_self_judging: bool = False
    unsafe_code_execution: bool = False
    #: "I/N": play shard I of N of the plan
    shard: str | None = None
    #: family -> its own options as `--set NAME.KEY=VALUE` gave them (each family checks its own)
    family_options: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def quick(self) -> bool:
        """No scenario, limit or --all named: the quick suite."""
        return not self.scenarios and self.limit is None and not self.all_instances


def plan_run(request: RunRequest, catalog: Catalog, families: Sequence[FamilyEntry[Any]]) -> RunConfig:
    """The config of a new run of `request` over the registered `families`."""
    players = catalog.expand_sweeps(request.players or catalog.defaults.players)
    if not players:
        raise ApplianceError(f"{catalog.source}: no players given and field 'defaults.players' is empty")
    quick = request.quick
    if request.limit is not None or request.all_instances:
        limits: dict[str, int] = {}
    elif quick:
        limits = {entry.name: entry.quick_limit for entry in families}
    else:
        limits = {entry.name: entry.default_limit for entry in families if entry.default_limit is not None}
    turn_caps = (
        {entry.name: entry.quick_turns for entry in families if entry.quick_turns is not None}
        if quick and request.turns is None
        else {}
    )
    reply_caps = (
        {entry.name: entry.quick_reply_tokens for entry in families if entry.quick_reply_tokens is not None}
        if quick
        else {}
    )
    config = RunConfig(
        scenarios=request.scenarios or [entry.name for entry in families],
        players=players,
        interrogator=request.interrogator or catalog.defaults.interrogator or players[0],
        panel=get_panel(judges_dir() / "panels.toml", request.panel),
        seed=request.seed,
        limit=None if request.all_instances else (request.limit or DEFAULT_LIMIT),
        limits=limits,
        quick=quick,
        turn_caps=turn_caps,
        reply_caps=reply_caps,
        parallel=request.parallel,
        models_file=str(catalog.source),
        cross_play=request.cross_play,
        exclude_self_judging=request.exclude_self_judging,
        simulator=request.simulator or catalog.defaults.simulator,
        turns=request.turns,
        unsafe_code_execution=request.unsafe_code_execution,
        shard=request.shard,
    )
    options = checked_family_options(request.family_options, config.scenarios)
    config.families = {  # every scenario of a family gets the options `--set NAME.KEY` gave the family
        spec: FamilySettings(options=options[family_of(spec)])
        for spec in config.scenarios
        if family_of(spec) in options
    }
    for name in config.role_models():
        catalog.get(name)  # an unknown model is refused before anything is loaded
    return config


def checked_family_options(given: dict[str, dict[str, str]], scenarios: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each family's `--set` options checked by the family's own model, as the run stores them (only the
    keys given); a family the run does not play is refused."""
    playing = {family_of(spec) for spec in scenarios}
    checked: dict[str, dict[str, Any]] = {}
    for name, values in given.items():
        if name not in playing:
            raise ApplianceError(f"--set {name}.{next(iter(values))}: '{name}' is not a scenario of this run")
        options = family_options(family_entry(name), values)
        if options is not None:
            checked[name] = options.model_dump(mode="json", exclude_unset=True)
    return checked


def parse_family_options(assignments: Sequence[str]) -> dict[str, dict[str, str]]:
    """`NAME.KEY=VALUE` assignments by family, the values as written (each family's model converts them)."""
    parsed: dict[str, dict[str, str]] = {}
    for assignment in assignments:
        target, equals, value = assignment.partition("=")
        name, dot, key = target.strip().partition(".")
        if not (equals and dot and name and key):
            raise ApplianceError(
                f"--set '{assignment}': expected NAME.KEY=VALUE (a family, one of its options, a value)"
            )
        parsed.setdefault(name, {})[key.strip()] = value.strip()
    return parsed


def quick_suite_note(config: RunConfig, families: Sequence[FamilyEntry[Any]]) -> str:
    """What the quick suite shortened, in each family's own unit (episodes per game, ...)."""
    units = {entry.name: entry.limit_unit for entry in families}
    shown = ", ".join(f"{name} {count} {units.get(name, 'instances')}" for name, count in config.limits.items())
    capped = ", ".join(f"{name} {count}" for name, count in config.turn_caps.items()) or "none"
    by_cap: dict[int, list[str]] = {}
    for name, count in config.reply_caps.items():
        by_cap.setdefault(count, []).append(name)
    replies = "".join(f"; replies capped at {count} tokens: {', '.join(names)}" for count, names in by_cap.items())
    return (
        f"Quick suite, shortened: {shown}; turns (rounds) capped: {capped}{replies}. "
        "Name --scenario, --limit, --turns or --all for the methods' own sizes."
    )
