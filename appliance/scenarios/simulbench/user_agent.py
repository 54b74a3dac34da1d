"""The user agent: each turn it picks a strategy and writes the next request, as grammar-constrained JSON.

The grammar caps the request's length so the JSON closes before the token
limit; the parser still checks everything, and a reply that does not parse
is retried once with a fresh seed before the dialogue ends early.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from appliance.engine.types import Message
from appliance.errors import ApplianceError, describe_validation_error
from appliance.scenarios.simulbench.scripts import DialogueTurn
from appliance.scenarios.simulbench.tasks import SimulBenchTask
from appliance.tomlfile import read_toml

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
    #: must hold the longest JSON the grammar allows (see `check_agent_budget`)
    user_agent_max_tokens: int = Field(default=840, ge=16)
    request_max_chars: int = Field(default=400, ge=8)
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
        needed = longest_agent_reply_tokens(settings.request_max_chars)
        if settings.user_agent_max_tokens < needed:
            raise ApplianceError(
                f"{path}: field 'user_agent_max_tokens' is {settings.user_agent_max_tokens}, but a request of "
                f"request_max_chars = {settings.request_max_chars} can take {needed} tokens; "
                "raise it or shorten the request"
            )
        return settings


@dataclass(frozen=True)
class StrategyReply:
    strategy: str
    request: str


class StrategyError(ValueError):
    """The user agent's reply is not a JSON object with a known strategy and a non-empty request."""


def parse_strategy_reply(text: str) -> StrategyReply:
    try:
        data = json.loads(text.strip())
    except json.JSONDecodeError as error:
        raise StrategyError(f"not JSON ({error.msg})") from None
    if not isinstance(data, dict):
        raise StrategyError("not a JSON object")
    strategy = data.get("strategy")
    if strategy not in STRATEGIES:
        raise StrategyError(f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    request = data.get("request")
    if not isinstance(request, str) or not request.strip():
        raise StrategyError("field 'request' is missing or empty")
    return StrategyReply(strategy=str(strategy), request=request.strip())


def longest_agent_reply_tokens(max_chars: int) -> int:
    """Tokens the longest ASCII reply the grammar allows can take: one per character at worst, two for an escape.

    A token cap below this could cut the JSON before the grammar closes it, which
    happened with a tiny model writing random letters; non-ASCII characters can
    still take more tokens, and such a cut reply is retried like any other.
    """
    overhead = len('{"strategy": "", "request": ""}') + max(len(name) for name in STRATEGIES)
    return overhead + 2 * max_chars


def strategy_grammar(max_chars: int) -> str:
    """`{"strategy": "<name>", "request": "<1..max_chars JSON string characters>"}`."""
    names = " | ".join(f'"{name}"' for name in STRATEGIES)
    return "\n".join(
        [
            f'root ::= "{{\\"strategy\\": \\"" strategy "\\", \\"request\\": \\"" char{{1,{max_chars}}} "\\"}}"',
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
