"""The game master's toolkit: seats that talk to models, request counts, outcomes.

A game is straight-line async code: it renders prompts, asks a seat, parses the
reply with the game's rules and decides what happens next. A reply that breaks
a parse rule raises `Abort`, which ends the episode as aborted (clembench's
"% played" counts the episodes that were not). Losing is not aborting: a lost
game was played to its end under the rules and scores quality 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from appliance.catalog.sampling import Sampling
from appliance.engine.types import Message
from appliance.episodes.context import EpisodeContext
from appliance.scenarios.base import RULE_SCORER
from appliance.scenarios.clembench.caps import reply_cap, sentence
from appliance.store.records import ScoreRecord

#: clembench's own metric names, kept verbatim so imported and native episodes aggregate alike
ABORTED = "Aborted"
SUCCESS = "Success"
LOSE = "Lose"
MAIN_SCORE = "Main Score"
REQUESTS = "Request Count"
PARSED = "Parsed Request Count"
VIOLATED = "Violated Request Count"
SUCCESS_RATIO = "Request Success Ratio"


class Abort(Exception):
    """A move broke the game's parse rules; the episode ends as aborted."""


@dataclass
class Requests:
    """How many requests went to players, and how many of their replies parsed."""

    total: int = 0
    parsed: int = 0
    violated: int = 0

    def ok(self) -> None:
        self.parsed += 1

    def broken(self, reason: str) -> Abort:
        """Count a reply that broke the rules; returns the `Abort` for the caller to raise."""
        self.violated += 1
        return Abort(reason)


@dataclass
class Seat:
    """One game role (describer, guesser, ...) played by the model bound to `binding`.

    The seat keeps the role's own chat history, so each player sees only what
    the game master tells it, and its KV cache is reused from turn to turn.
    """

    ctx: EpisodeContext
    binding: str
    name: str
    sampling: Sampling
    requests: Requests
    history: list[Message] = field(default_factory=list)

    async def ask(self, prompt: str, *, remember: bool = True) -> str:
        """Send `prompt` from the game master; return the player's reply, stripped.

        `remember=False` asks a side question (a probe) that stays out of the history.
        """
        self.ctx.record_note(f"gm>{self.name}", prompt)
        messages = [*self.history, Message(role="user", content=prompt)]
        self.requests.total += 1
        completion = await self.ctx.generate(
            self.binding, messages, sampling=self.sampling, conversation=self.name, record=False
        )
        self.ctx.record_message(self.name, self.ctx.model_for(self.binding), completion)
        reply = completion.text.strip()
        if remember:
            self.history = [*messages, Message(role="assistant", content=reply)]
        return reply


@dataclass
class GameTable:
    """Where a game is played: the episode, its request counts, and the seats it opens."""

    ctx: EpisodeContext
    #: the instance's language (free-text reply caps are measured on prose in it)
    language: str = "en"
    requests: Requests = field(default_factory=Requests)

    def seat(self, binding: str, name: str, *longest_replies: str) -> Seat:
        """A role for the model bound to `binding` ("player" or "partner"), decoded greedily as clembench does,
        capped at what the longest of `longest_replies` (the longest replies its prompt asks for, whichever
        tokenizes longest) takes in that model's tokens."""
        cap = max(reply_cap(self.ctx, binding, reply) for reply in longest_replies)
        return Seat(self.ctx, binding, name, Sampling(temperature=0.0, max_tokens=cap), self.requests)

    def sentence(self) -> str:
        """The longest free-text sentence a reply may hold, in the instance's language."""
        return sentence(self.language)


Status = Literal["success", "lose", "aborted"]


@dataclass
class Outcome:
    """How an episode ended and its game-specific scores (quality is `main_score`, 0-100)."""

    status: Status
    main_score: float | None
    extra: dict[str, float | None] = field(default_factory=dict)
    turn_scores: list[dict[str, float | None]] = field(default_factory=list)

    @classmethod
    def aborted(cls, extra: dict[str, float | None] | None = None) -> Outcome:
        return cls("aborted", None, dict(extra or {}))


def episode_scores(outcome: Outcome, requests: Requests, player: str) -> list[ScoreRecord]:
    """The episode's scores under clembench's metric names."""
    values: dict[str, float | None] = {
        ABORTED: float(outcome.status == "aborted"),
        SUCCESS: float(outcome.status == "success"),
        LOSE: float(outcome.status == "lose"),
        MAIN_SCORE: None if outcome.status == "aborted" else outcome.main_score,
        REQUESTS: float(requests.total),
        PARSED: float(requests.parsed),
        VIOLATED: float(requests.violated),
        SUCCESS_RATIO: requests.parsed / requests.total if requests.total else 0.0,
        **outcome.extra,
    }
    return [ScoreRecord(panel=RULE_SCORER, player=player, metric=m, value=v) for m, v in values.items()]
