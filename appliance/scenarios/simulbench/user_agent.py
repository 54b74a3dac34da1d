"""The user agent: each turn it picks a strategy and writes the next request, as grammar-constrained JSON.

Its whole reply is capped at the paper's 300 tokens. A reply the cap cuts
inside the request keeps the request written so far, as the paper's cap cuts
an utterance; the parser still checks everything else, and a reply that does
not parse is retried once with a fresh seed before the dialogue ends early.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from appliance.engine.types import Message
from appliance.errors import ApplianceError, describe_validation_error
from appliance.scenarios.simulbench.scripts import DialogueTurn
from appliance.scenarios.simulbench.tasks import SimulBenchTask
from appliance.util.tomlfile import read_toml

STRATEGIES = ("flaw", "related", "harder", "other")


class UserAgentPrompts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str
    user: str


class SimulBenchSettings(BaseModel):
    """scenarios/simulbench/prompts.toml: the opening template, user agent prompts and collection defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    opening: str
    dialogues_per_task: int = Field(default=3, ge=1)
    max_turns: int = Field(default=4, ge=1)
    user_agent_temperature: float = Field(default=1.2, ge=0.0)
    #: the paper's cap on a user agent utterance; here it bounds the whole JSON reply
    user_agent_max_tokens: int = Field(default=300, ge=16)
    simulator_temperature: float = Field(default=0.0, ge=0.0)
    simulator_max_tokens: int = Field(default=1024, ge=8)
    #: the models under test answer a script's last request with at most this many tokens
    target_max_tokens: int = Field(default=1024, ge=8)
    strategies: dict[str, str]
    user_agent: UserAgentPrompts

    @classmethod
    def load(cls, path: Path) -> SimulBenchSettings:
        raw = read_toml(path, "SimulBench prompts")
        try:
            settings = cls.model_validate(raw)
        except ValidationError as error:
            raise ApplianceError(describe_validation_error(path, error)) from None
        if sorted(settings.strategies) != sorted(STRATEGIES):
            raise ApplianceError(f"{path}: field 'strategies' must describe exactly {', '.join(STRATEGIES)}")
        return settings


@dataclass(frozen=True)
class StrategyReply:
    strategy: str
    request: str


class StrategyError(ValueError):
    """The user agent's reply is not a JSON object with a known strategy and a non-empty request."""


_CUT_REQUEST = re.compile(r'\s*\{"strategy": "(?P<strategy>[a-z]+)", "request": "(?P<request>.*)\Z', re.DOTALL)


def parse_strategy_reply(text: str, cut: bool = False) -> StrategyReply:
    """`cut`: the token cap ended the reply; if it ended inside the request, the request so far stands."""
    try:
        data = json.loads(text.strip())
    except json.JSONDecodeError as error:
        partial = _CUT_REQUEST.match(text) if cut else None
        if partial is None:
            raise StrategyError(f"not JSON ({error.msg})") from None
        data = {"strategy": partial["strategy"], "request": _close_json_string(partial["request"])}
    if not isinstance(data, dict):
        raise StrategyError("not a JSON object")
    strategy = data.get("strategy")
    if strategy not in STRATEGIES:
        raise StrategyError(f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    request = data.get("request")
    if not isinstance(request, str) or not request.strip():
        raise StrategyError("field 'request' is missing or empty")
    return StrategyReply(strategy=str(strategy), request=request.strip())


def _close_json_string(body: str) -> str:
    """The text of a JSON string cut before its closing quote (the grammar allows only simple escapes)."""
    trailing = len(body) - len(body.rstrip("\\"))
    if trailing % 2:
        body = body[:-1]  # a cut escape
    try:
        return str(json.loads(f'"{body}"'))
    except json.JSONDecodeError:
        raise StrategyError("not JSON (cut inside the request)") from None


def strategy_grammar() -> str:
    """`{"strategy": "<name>", "request": "<JSON string characters>"}`: its length is left to the token cap."""
    names = " | ".join(f'"{name}"' for name in STRATEGIES)
    return "\n".join(
        [
            'root ::= "{\\"strategy\\": \\"" strategy "\\", \\"request\\": \\"" char+ "\\"}"',
            f"strategy ::= {names}",
            'char ::= [^"\\\\\\x00-\\x1f] | "\\\\" ["\\\\/nt]',
        ]
    )


def user_agent_messages(settings: SimulBenchSettings, task: SimulBenchTask, turns: list[DialogueTurn]) -> list[Message]:
    """The agent sees the task and the dialogue so far; the system part stays fixed so its KV is reused."""
    strategies = "\n".join(f"- {name}: {text}" for name, text in settings.strategies.items())
    variables = {
        "name": task.name,
        "type": task.type,
        "description": task.description,
        "request_type": task.request_type or "requests of the kind the interface accepts",
        "strategies": strategies,
    }
    dialogue = "\n\n".join(f"User: {turn.request}\n\nSystem: {turn.reply}" for turn in turns)
    return [
        Message(role="system", content=settings.user_agent.system.format_map(variables)),
        Message(role="user", content=settings.user_agent.user.format_map({"dialogue": dialogue})),
    ]
