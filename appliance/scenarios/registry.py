"""The families the appliance knows: each registers itself, nothing here lists them.

A family package under `appliance/scenarios/` calls `register_family` when it
is imported; the first lookup imports every such package, then the modules that
installed packages declare under the `appliance.families` entry point group,
then those named in $APPLIANCE_FAMILIES (comma-separated module names). The
runner, reports, renderers, `scenarios list`, `import` and the default suite
all iterate over the result.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError
from rich.console import Console

from appliance.errors import ApplianceError, reading
from appliance.headline import Headline
from appliance.judging.evidence import FigureEvidence, figure_evidence
from appliance.paths import judges_dir, scenarios_dir
from appliance.run_config import RunConfig
from appliance.scenario_spec import ScenarioSpec, family_of
from appliance.scenarios.base import Family
from appliance.store import Store
from appliance.store.run_view import RunView
from appliance.util.plugins import Registry, import_submodules

ReportT = TypeVar("ReportT", bound=BaseModel)
ENTRY_POINT_GROUP = "appliance.families"
PLUGINS_VARIABLE = "APPLIANCE_FAMILIES"
#: the quick suite's cap on every reply a player, partner or game role writes. The small models' greedy
#: replies loop to the methods' caps (SimulBench's 1,024 tokens, DeepEval's 256-token code, clembench's
#: caps sized for the longest expected reply: over 390 SmolLM2 tokens in Japanese and Chinese), and those
#: loops were most of make run's tail
QUICK_REPLY_TOKENS = 128


@dataclass(frozen=True)
class LoadRequest:
    """What a family's loader gets: `spec` is `NAME` or `NAME:SOURCE` as the user wrote it."""

    spec: str
    #: the part after the colon ("" for the family's own data)
    source: str
    #: the family's own data folder (scenarios/NAME/ unless the entry says otherwise)
    data_folder: Path
    judges_folder: Path
    seed: int
    #: for sources stored in the database (instance sets); None where no store is open
    store: Store | None
    #: the family's own options (`appliance run --set NAME.KEY=VALUE`), checked by its `FamilyEntry.options`
    #: model; None for a family that declares none
    options: BaseModel | None = None

    def folder(self) -> Path:
        """The folder to read: SOURCE where one is given, else the family's own data folder."""
        folder = Path(self.source) if self.source else self.data_folder
        if not folder.is_dir():
            raise ApplianceError(f"scenario '{self.spec}': data folder {folder} not found")
        return folder


@dataclass(frozen=True)
class ImportRequest:
    path: Path
    #: --out: a folder or file to write converted data to (None: the importer's default)
    out: Path | None
    #: --name: the stored set's name (None: the importer's default)
    name: str | None
    #: --db: the store to write to (None: the default store)
    db: Path | None


ImportOption = Literal["out", "name", "db"]


@dataclass(frozen=True)
class Importer:
    """`appliance import KIND PATH`: converts another system's files; returns the lines to print."""

    kind: str
    help: str
    path_help: str
    run: Callable[[ImportRequest], list[str]]
    #: the options this kind understands; any other given is refused
    options: frozenset[ImportOption] = frozenset({"db"})


@dataclass(frozen=True)
class GenerateRequest:
    """`appliance scenarios generate FAMILY`: a fresh instance set from a seed."""

    seed: int
    per_experiment: int
    out: Path | None
    name: str | None
    db: Path | None
    #: only these games (clembench), all when empty
    games: tuple[str, ...] = ()


@dataclass(frozen=True)
class FamilyEntry(Generic[ReportT]):
    """Everything the appliance needs to know about a family, declared in one place."""

    name: str
    description: str
    load: Callable[[LoadRequest], Family]
    #: (the family's view of a stored run, panel or None for the run's) -> the family's report
    report: Callable[[RunView, str | None], ReportT]
    #: prints a report of this family on a terminal
    render: Callable[[Console, ReportT], None]
    #: instances per run in the quick suite (`appliance run` with no --scenario)
    quick_limit: int
    #: what a limit counts for this family, as the quick suite's note says it ("episodes per game")
    limit_unit: str = "instances"
    #: instances per run when a scenario is named without --limit or --all (None: the CLI's default)
    default_limit: int | None = None
    #: a cap on conversation turns (rounds) in the quick suite, where the family has turns
    quick_turns: int | None = None
    #: a cap on every reply's tokens in the quick suite (None: the method's own caps); judges' verdicts are
    #: not replies and keep the method's caps
    quick_reply_tokens: int | None = QUICK_REPLY_TOKENS
    importers: tuple[Importer, ...] = ()
    #: families whose instances are generated from a seed (clembench) store or write a fresh set
    generate: Callable[[GenerateRequest], list[str]] | None = None
    #: the data folder under scenarios/ (default: the family's name), or an absolute path
    data_folder: str = ""
    #: position in listings and in the default suite (lower first; ties by name)
    order: int = 100
    #: (the family's view of a stored run, panel or None) -> the units and headline metrics `appliance compare` pairs
    headline: Callable[[RunView, str | None], Headline] | None = None
    #: the family's own options, a pydantic model its loader reads from `LoadRequest.options`: a new option
    #: is a field here, set with `appliance run --set NAME.KEY=VALUE` and stored with the run
    options: type[BaseModel] | None = None

    def folder(self) -> Path:
        configured = Path(self.data_folder or self.name)
        return configured if configured.is_absolute() else scenarios_dir() / configured


def _discover() -> None:
    """Import every family package, entry point and $APPLIANCE_FAMILIES module."""
    import_submodules("appliance.scenarios", packages_only=True)
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        point.load()
    for name in filter(None, (part.strip() for part in os.environ.get(PLUGINS_VARIABLE, "").split(","))):
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise ApplianceError(f"${PLUGINS_VARIABLE}: cannot import family module '{name}' ({error})") from None


FAMILIES: Registry[FamilyEntry[Any]] = Registry("scenario family", _discover)


def register_family(entry: FamilyEntry[ReportT]) -> FamilyEntry[ReportT]:
    """Make a family known; registering another family under a taken name is an error."""
    FAMILIES.add(entry.name, entry)
    return entry


def families() -> list[FamilyEntry[Any]]:
    return sorted(FAMILIES.known().values(), key=lambda entry: (entry.order, entry.name))


def family_names() -> list[str]:
    return [entry.name for entry in families()]


def family_entry(spec: str) -> FamilyEntry[Any]:
    """The entry of `NAME` or `NAME:SOURCE`."""
    name = family_of(spec)
    return FAMILIES.get(name, f"unknown scenario '{name}'")


def load_family(
    spec: str,
    scenarios_root: Path | None = None,
    judges_root: Path | None = None,
    *,
    seed: int = 0,
    store: Store | None = None,
    options: Mapping[str, Any] | None = None,
) -> Family:
    """`NAME` uses the family's own data; `NAME:SOURCE` another source (a folder, a file, a stored set).
    `options`: the family's own options as a run sets them (checked here)."""
    entry, source = family_entry(spec), ScenarioSpec.parse(spec).source
    folder = scenarios_root / entry.name if scenarios_root is not None else entry.folder()
    checked = family_options(entry, options or {})
    request = LoadRequest(spec, source, folder, judges_root or judges_dir(), seed, store, checked)
    with reading(source or folder):
        family = entry.load(request)
        for stage in family.stages():
            stage.instances()  # lazily read data fails here, not halfway through a run
    return family


def load_run_family(spec: str, config: RunConfig, store: Store | None = None) -> Family:
    """A family as run `config` plays it: with the run's seed and the options the run set for it."""
    return load_family(spec, seed=config.seed, store=store, options=config.family_settings(spec).options)


def family_options(entry: FamilyEntry[Any], values: Mapping[str, Any]) -> BaseModel | None:
    """`values` checked by the options model `entry` declares: a key it does not have, or a value of the
    wrong kind, is one line naming `--set NAME.KEY`."""
    if entry.options is None:
        if values:
            raise ApplianceError(f"--set {entry.name}.{next(iter(values))}: family '{entry.name}' has no options")
        return None
    try:
        return entry.options(**values)
    except ValidationError as error:
        first = error.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise ApplianceError(f"--set {entry.name}.{key}: {first['msg']}") from None


def run_import(importer: Importer, request: ImportRequest) -> list[str]:
    """`importer` on `request.path`; whatever the file holds, it imports or fails in one line naming it."""
    with reading(request.path):
        return importer.run(request)


def importers() -> dict[str, Importer]:
    """Every import kind of every family, by kind."""
    return {importer.kind: importer for entry in families() for importer in entry.importers}


@dataclass(frozen=True)
class ScenarioReport:
    """A family's report of one run, with the renderer that prints it, and the evidence behind each of
    its judged figures (`appliance.judging.evidence`), which every report, page and export shows."""

    family: FamilyEntry[Any]
    report: BaseModel
    evidence: list[FigureEvidence]

    def render(self, console: Console) -> None:
        self.family.render(console, self.report)
        if self.evidence:
            console.print("Judged figures (calibration; whether the panel separated the players):")
            for figure in self.evidence:
                for line in figure.lines():
                    console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)

    def model_dump(self) -> dict[str, Any]:
        return self.report.model_dump() | {"judged_figures": [figure.model_dump() for figure in self.evidence]}


def build_scenario_report(store: Store, run_id: str, scenario: str, panel: str | None = None) -> ScenarioReport:
    entry = family_entry(scenario)
    run = RunView(store, run_id, scenario)
    return ScenarioReport(entry, entry.report(run, panel), scenario_evidence(store, run_id, scenario, panel))


def scenario_evidence(store: Store, run_id: str, scenario: str, panel: str | None = None) -> list[FigureEvidence]:
    """The calibration and separation of each judged figure the family reports for this run."""
    entry = family_entry(scenario)
    if entry.headline is None:
        return []
    run = RunView(store, run_id, scenario)
    return figure_evidence(run, panel, entry.headline(run, panel), entry.name)
