"""SimulBench as a staged scenario family, and where its tasks or scripts come from.

`simulbench` collects dialogues on our tasks (scenarios/simulbench/*.toml);
`simulbench:SOURCE` uses SimulBench's published tasks or scripts, from a JSONL
file or from a set stored by `appliance import simulbench-tasks|simulbench-scripts`.
Tasks run all stages; scripts only evaluate and compare.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from appliance.errors import ApplianceError
from appliance.judging.scoring_templates import LikelihoodTemplate
from appliance.judging.templates import (
    JudgeTemplate,
    PairwiseTemplate,
    RatingTemplate,
    YesNoTemplate,
    load_judge_template,
)
from appliance.scenario_spec import family_of
from appliance.scenarios.base import ScenarioFamily, StagedFamily
from appliance.scenarios.simulbench.report import PERFECT_DECIDED_BY, PERFECT_SCRIPTS, perfect_scripts_of_run
from appliance.scenarios.simulbench.scripts import SCRIPT_SET_FORMAT, ScriptSet, TestScript, read_published_scripts
from appliance.scenarios.simulbench.stages import (
    PAIR_LIKELIHOOD_TEMPLATE,
    CollectStage,
    CompareStage,
    EvaluateStage,
    ExtractStage,
)
from appliance.scenarios.simulbench.tasks import (
    TASK_SET_FORMAT,
    SimulBenchTask,
    TaskSet,
    load_task_folder,
    read_jsonl,
    read_published_tasks,
)
from appliance.scenarios.simulbench.user_agent import SimulBenchSettings
from appliance.store import Store
from appliance.store.instance_sets import load_instance_set
from appliance.store.run_view import RunView

TemplateT = TypeVar("TemplateT", RatingTemplate, PairwiseTemplate, YesNoTemplate, LikelihoodTemplate)
TEMPLATES = ("challenging_turn", "simulbench_rating", "simulbench_pairwise", PAIR_LIKELIHOOD_TEMPLATE)


#: published scripts: the study already left out the 10 that all its 14 models answered perfectly
PUBLISHED: dict[str, object] = {
    PERFECT_SCRIPTS: [],
    PERFECT_DECIDED_BY: "the published study, which left out the scripts all its models answered perfectly",
}
DESCRIPTION = "a user agent drives simulation tasks; challenging scripts are extracted and judged (1-10, pairwise)"


class SimulBenchFamily(StagedFamily):
    description = DESCRIPTION

    def __init__(
        self,
        name: str,
        settings: SimulBenchSettings,
        templates: dict[str, JudgeTemplate],
        files: list[Path],
        *,
        tasks: list[SimulBenchTask] | None = None,
        scripts: list[TestScript] | None = None,
        perfect: dict[str, object] | None = None,
    ) -> None:
        """`perfect`: the perfect scripts of a script set made elsewhere and who decided them (stored with
        the run, `report.PERFECT_SCRIPTS`); None when this run's own players decide them."""
        if (tasks is None) == (scripts is None):
            raise ValueError("SimulBench needs either tasks or scripts")
        self.name = name
        self.perfect = perfect
        evaluate = EvaluateStage(name, settings, files, _as(templates["simulbench_rating"], RatingTemplate), scripts)
        pairwise = _as(templates["simulbench_pairwise"], PairwiseTemplate)
        reading = _as(templates[PAIR_LIKELIHOOD_TEMPLATE], LikelihoodTemplate)
        compare = CompareStage(name, settings, files, pairwise, evaluate, reading)
        self._stages: list[CollectStage | ExtractStage | EvaluateStage | CompareStage] = [evaluate, compare]
        if tasks is not None:
            challenge = _as(templates["challenging_turn"], YesNoTemplate)
            self._stages = [
                CollectStage(name, settings, files, tasks),
                ExtractStage(name, settings, files, tasks, challenge),
                *self._stages,
            ]

    def stages(self) -> list[ScenarioFamily]:
        """Collect, extract, evaluate, compare; or evaluate and compare for imported scripts."""
        return list(self._stages)

    def settings_snapshot(self) -> dict[str, object]:
        """The script set's perfect scripts when they were decided before this run (the report reads them)."""
        return dict(self.perfect or {})


def _as(template: JudgeTemplate, kind: type[TemplateT]) -> TemplateT:
    if not isinstance(template, kind):
        raise ApplianceError(f"judges/{template.name}.toml: field 'mode' does not suit SimulBench ({template.mode})")
    return template


def load_simulbench(
    spec: str, source: str, data_folder: Path, judges_folder: Path, *, store: Store | None
) -> SimulBenchFamily:
    """`simulbench` (our tasks) or `simulbench:SOURCE`: a tasks or scripts JSONL file, a folder of task
    TOML files, or the name of a set stored by `appliance import`."""
    path = Path(source) if source else data_folder
    # a task folder may carry its own prompts.toml (e.g. shorter dialogues); otherwise ours applies
    prompts = (
        path / "prompts.toml" if path.is_dir() and (path / "prompts.toml").is_file() else data_folder / "prompts.toml"
    )
    settings = SimulBenchSettings.load(prompts)
    templates = {name: load_judge_template(judges_folder / f"{name}.toml") for name in TEMPLATES}
    files = [prompts, *(judges_folder / f"{name}.toml" for name in TEMPLATES)]
    if path.is_dir():
        tasks = load_task_folder(path)
        task_files = [f for f in sorted(path.glob("*.toml")) if f != prompts]
        return SimulBenchFamily(spec, settings, templates, [*files, *task_files], tasks=tasks)
    if path.is_file():
        loaded = read_simulbench_file(path)
        if isinstance(loaded, TaskSet):
            return SimulBenchFamily(spec, settings, templates, [*files, path], tasks=loaded.tasks)
        return SimulBenchFamily(spec, settings, templates, [*files, path], scripts=loaded.scripts, perfect=PUBLISHED)
    payload = load_instance_set(store, source) if store is not None else None
    if payload is None and store is not None and store.has_run(source):
        stored_run = RunView(store, source, spec)
        scripts, perfect = scripts_of_run(stored_run), perfect_scripts_of_run(stored_run)
        return SimulBenchFamily(spec, settings, templates, files, scripts=scripts, perfect=perfect)
    if payload is None:
        raise ApplianceError(
            f"scenario '{spec}': '{source}' is neither a file, a folder, a stored set nor a stored run"
        )
    if payload.get("format") == TASK_SET_FORMAT:
        return SimulBenchFamily(spec, settings, templates, files, tasks=TaskSet.model_validate(payload).tasks)
    if payload.get("format") == SCRIPT_SET_FORMAT:
        scripts = ScriptSet.model_validate(payload).scripts
        return SimulBenchFamily(spec, settings, templates, files, scripts=scripts, perfect=PUBLISHED)
    raise ApplianceError(f"scenario '{spec}': stored set '{source}' holds no SimulBench tasks or scripts")


def scripts_of_run(run: RunView) -> list[TestScript]:
    """The test scripts a stored run extracted (`run`: a view of any of its scenarios): its collected
    dialogues, evaluated again without collecting.

    This reuse is SimulBench's point: dialogues are collected once with a fixed simulator, and
    new models are evaluated on the same scripts later.
    """
    extracted = [
        episode
        for scenario in run.run_scenarios
        if family_of(scenario) == "simulbench"
        for episode in run.sibling(scenario).episodes(finished_only=True, instance_prefix="extract/")
    ]
    scripts = [TestScript.model_validate(script) for e in extracted for script in e.metadata.get("scripts", [])]
    if not scripts:
        raise ApplianceError(f"run '{run.run_id}': no SimulBench test scripts were extracted in it")
    return scripts


def read_simulbench_file(path: Path) -> TaskSet | ScriptSet:
    """SimulBench's published JSONL: scripts carry a dialogue_history, tasks do not."""
    first = read_jsonl(path, "SimulBench records")[0]
    if "dialogue_history" in first:
        return read_published_scripts(path)
    if "task_description" in first:
        return read_published_tasks(path)
    raise ApplianceError(f"{path}: neither SimulBench tasks (task_description) nor scripts (dialogue_history)")
