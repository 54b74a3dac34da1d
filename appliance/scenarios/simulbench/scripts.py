"""Test scripts: a dialogue history ending on a user request that every target model answers.

Scripts come from collected dialogues (stage 2) or from SimulBench's
published set. Three kinds, as in the paper:

- LastOnly: the last turn of a dialogue in which no challenging turn was found;
- FirstChan: the first challenging turn (a demanding request the simulator got wrong);
- SubseqChan: every turn after it (its history may hold the simulator's errors).

FirstChan + SubseqChan is the hard subset.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from appliance.engine.types import Message
from appliance.errors import ApplianceError
from appliance.scenarios.simulbench.tasks import SimulBenchTask, need_text, need_type, read_jsonl

ScriptKind = Literal["LastOnly", "FirstChan", "SubseqChan"]
SCRIPT_KINDS: tuple[ScriptKind, ...] = ("LastOnly", "FirstChan", "SubseqChan")
HARD_KINDS = frozenset({"FirstChan", "SubseqChan"})
SCRIPT_SET_FORMAT = "appliance.simulbench.scripts/1"


class DialogueTurn(BaseModel):
    """One user request and the simulator's reply, with the user agent's strategy ("opening" for turn 1)."""

    model_config = ConfigDict(frozen=True)

    request: str
    reply: str
    strategy: str


class ChatTurn(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Literal["user", "assistant"]
    content: str


class TestScript(BaseModel):
    model_config = ConfigDict(frozen=True)
    __test__ = False  # not a pytest class

    id: str
    task: SimulBenchTask
    kind: ScriptKind
    #: the turn whose request the target answers (1 = the opening)
    turn: int
    #: alternating user/assistant messages, ending on the user's request
    history: list[ChatTurn]

    @property
    def hard(self) -> bool:
        return self.kind in HARD_KINDS

    def messages(self) -> list[Message]:
        return [Message(role=turn.role, content=turn.content) for turn in self.history]

    @property
    def request(self) -> str:
        return self.history[-1].content

    def earlier_turns(self, keep_last: int | None = None) -> str:
        """The history before the last request, as judges read it (only the last `keep_last` messages)."""
        return render_turns(self.history[:-1], keep_last)

    def earlier_turn_count(self) -> int:
        return len(self.history) - 1


class ScriptSet(BaseModel):
    format: str = SCRIPT_SET_FORMAT
    name: str
    source: str
    scripts: list[TestScript]


def render_turns(history: list[ChatTurn], keep_last: int | None = None) -> str:
    """Earlier turns as "User: ..." / "System: ..." paragraphs. With `keep_last`, only the most recent
    messages are shown and the others are counted, so a judge whose context cannot hold the whole
    history still sees the turns nearest the request."""
    if not history:
        return "(none: this is the first turn)"
    lines = [f"{'User' if t.role == 'user' else 'System'}: {t.content.strip()}" for t in history]
    if keep_last is None or keep_last >= len(lines):
        return "\n\n".join(lines)
    kept = lines[len(lines) - keep_last :] if keep_last else []
    return "\n\n".join([f"({len(lines) - len(kept)} earlier messages left out)", *kept])


def history_until(turns: list[DialogueTurn], turn: int) -> list[ChatTurn]:
    """The dialogue up to the request of `turn` (1-based), without the reply to it."""
    history: list[ChatTurn] = []
    for earlier in turns[: turn - 1]:
        history += [ChatTurn(role="user", content=earlier.request), ChatTurn(role="assistant", content=earlier.reply)]
    return [*history, ChatTurn(role="user", content=turns[turn - 1].request)]


def extract_scripts(
    task: SimulBenchTask, dialogue_id: str, turns: list[DialogueTurn], first_challenging: int | None
) -> list[TestScript]:
    """LastOnly when no turn is challenging; otherwise FirstChan at that turn and SubseqChan after it."""
    if not turns:
        return []
    if first_challenging is None:
        picked: list[tuple[int, ScriptKind]] = [(len(turns), "LastOnly")]
    else:
        if not 1 <= first_challenging <= len(turns):
            raise ValueError(f"challenging turn {first_challenging} outside 1..{len(turns)}")
        picked = [(first_challenging, "FirstChan")]
        picked += [(turn, "SubseqChan") for turn in range(first_challenging + 1, len(turns) + 1)]
    return [
        TestScript(
            id=f"{dialogue_id}{_TURN_MARK}{turn}", task=task, kind=kind, turn=turn, history=history_until(turns, turn)
        )
        for turn, kind in picked
    ]


#: between an extracted script's dialogue and its turn in the script's id
_TURN_MARK = "/t"


def dialogue_of(script: TestScript) -> str:
    """The dialogue an extracted script was cut from (the inverse of `extract_scripts`' id); an
    imported script is its own."""
    dialogue, mark, _ = script.id.rpartition(_TURN_MARK)
    return dialogue if mark else script.id


def read_published_scripts(path: Path) -> ScriptSet:
    """SimulBench's simulbench_all.jsonl. `turn_num` 0 marks LastOnly; among the other scripts of one
    collected dialogue (same task and source file) the earliest is FirstChan, the rest SubseqChan."""
    rows = read_jsonl(path, "SimulBench scripts")
    parsed: list[tuple[dict[str, Any], list[ChatTurn], int]] = []
    for number, row in enumerate(rows, start=1):
        history = _published_history(row, path, number)
        turn_num = row.get("turn_num")
        if not isinstance(turn_num, int) or turn_num < 0:
            raise ApplianceError(f"{path}: record {number}: field 'turn_num' must be a whole number >= 0")
        parsed.append((row, history, turn_num))
    first_turn: dict[tuple[str, str], int] = defaultdict(lambda: 10**9)
    for row, _, turn_num in parsed:
        if turn_num > 0:
            key = (str(row.get("source_id")), str(row.get("source_file_name")))
            first_turn[key] = min(first_turn[key], turn_num)
    scripts = []
    for number, (row, history, turn_num) in enumerate(parsed, start=1):
        task = SimulBenchTask(
            id=need_text(row, "source_id", path, number),
            name=need_text(row, "act", path, number),
            type=need_type(row, path, number),
            description=need_text(row, "task_description", path, number),
        )
        user_turns = sum(1 for turn in history if turn.role == "user")
        kind: ScriptKind = "LastOnly"
        if turn_num > 0:
            key = (task.id, str(row.get("source_file_name")))
            kind = "FirstChan" if turn_num == first_turn[key] else "SubseqChan"
        scripts.append(
            TestScript(id=f"published-{row.get('id', number)}", task=task, kind=kind, turn=user_turns, history=history)
        )
    return ScriptSet(name="simulbench-scripts", source=str(path), scripts=scripts)


def _published_history(row: dict[str, Any], path: Path, number: int) -> list[ChatTurn]:
    raw = row.get("dialogue_history")
    if not isinstance(raw, list) or not raw:
        raise ApplianceError(f"{path}: record {number}: field 'dialogue_history' must be a non-empty list")
    history = []
    for index, message in enumerate(raw):
        expected = "user" if index % 2 == 0 else "assistant"
        if (
            not isinstance(message, dict)
            or message.get("role") != expected
            or not isinstance(message.get("content"), str)
        ):
            raise ApplianceError(
                f"{path}: record {number}: dialogue_history[{index}] must be a {expected} message with text content"
            )
        history.append(ChatTurn(role=expected, content=message["content"]))
    if history[-1].role != "user":
        raise ApplianceError(f"{path}: record {number}: dialogue_history must end on a user message")
    return history
