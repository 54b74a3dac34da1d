"""Simulation tasks: our own (scenarios/simulbench/*.toml) and SimulBench's published ones (JSONL).

A task is an interface the model under test must simulate. The first user
turn of every dialogue states the interface and makes the first request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from appliance.errors import ApplianceError, describe_validation_error
from appliance.util.jsonlines import read_jsonl_rows
from appliance.util.tomlfile import read_toml

TaskType = Literal["stateless", "stateful"]
TASK_SET_FORMAT = "appliance.simulbench.tasks/1"


class SimulBenchTask(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    type: TaskType
    #: the interface and its output format, in the user's words
    description: str
    #: empty when the description already ends with the first request (SimulBench's published tasks)
    first_request: str = ""
    #: what the user agent's requests are about
    request_type: str = ""

    def opening(self, template: str) -> str:
        """The first user turn of a dialogue."""
        if not self.first_request:
            return self.description
        return template.format_map({"description": self.description, "first_request": self.first_request})

    def summary(self) -> str:
        """How judges are told which interface is simulated."""
        return f"{self.name} ({self.type})\n{self.description}"


class TaskSet(BaseModel):
    format: str = TASK_SET_FORMAT
    name: str
    source: str
    tasks: list[SimulBenchTask]


def load_task_folder(folder: Path) -> list[SimulBenchTask]:
    """Every `[[tasks]]` of the TOML files in `folder` whose top-level `type` names the task type."""
    tasks: list[SimulBenchTask] = []
    for path in sorted(folder.glob("*.toml")):
        raw = read_toml(path, "SimulBench tasks")
        if "tasks" not in raw:
            continue
        task_type = raw.get("type")
        for index, entry in enumerate(raw["tasks"]):
            try:
                tasks.append(SimulBenchTask.model_validate({"type": task_type, **entry}))
            except ValidationError as error:
                raise ApplianceError(describe_validation_error(f"{path} tasks[{index}]", error)) from None
    if not tasks:
        raise ApplianceError(f"{folder}: no SimulBench tasks (no TOML file with [[tasks]])")
    _check_unique([task.id for task in tasks], folder)
    return tasks


def read_jsonl(path: Path, what: str) -> list[dict[str, Any]]:
    """Rows of a JSONL file, at least one."""
    rows = [row for _, row in read_jsonl_rows(path, what)]
    if not rows:
        raise ApplianceError(f"{path}: no {what}")
    return rows


def need_text(row: dict[str, Any], field: str, path: Path, number: int) -> str:
    value = row.get(field)
    if not isinstance(value, str) or not value.strip():
        raise ApplianceError(f"{path}: record {number}: field '{field}' is missing or not text")
    return value


def need_type(row: dict[str, Any], path: Path, number: int) -> TaskType:
    value = row.get("type")
    if value not in ("stateless", "stateful"):
        raise ApplianceError(f"{path}: record {number}: field 'type' must be 'stateless' or 'stateful', not {value!r}")
    return "stateless" if value == "stateless" else "stateful"


def read_published_tasks(path: Path) -> TaskSet:
    """SimulBench's simulbench_tasks.jsonl: id, act, task_description (ending on the first request), type."""
    tasks = []
    for number, row in enumerate(read_jsonl(path, "SimulBench tasks"), start=1):
        tasks.append(
            SimulBenchTask(
                id=need_text(row, "id", path, number),
                name=need_text(row, "act", path, number),
                type=need_type(row, path, number),
                description=need_text(row, "task_description", path, number),
                request_type=str(row.get("request_type") or ""),
            )
        )
    _check_unique([task.id for task in tasks], path)
    return TaskSet(name="simulbench-tasks", source=str(path), tasks=tasks)


def _check_unique(ids: list[str], where: Path) -> None:
    seen: set[str] = set()
    for task_id in ids:
        if task_id in seen:
            raise ApplianceError(f"{where}: task id '{task_id}' appears twice")
        seen.add(task_id)
