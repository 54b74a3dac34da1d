"""DeepEval's tasks: who plays which role, which stored score is each role's payoff, and its kind.

A payoff's kind decides how its stability is judged (`payoffs.py`): an
*amount* (coins, a 1-10 rating) by the bootstrap interval of its mean against
its range, an *outcome* (win/draw/loss points: values in 0..1) by the Wilson
interval of a proportion, which a run of identical results does not make
zero-wide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from appliance.scenarios.deepeval.settings import PublicGoods

PayoffKind = Literal["amount", "outcome"]
RATING_RANGE = 9.0  # the panel's 1-10 scale
TASKS = ("public_goods_mode1", "public_goods_mode2", "idiom_chain", "word_chain", "code_review", "translation")


@dataclass(frozen=True)
class Payoff:
    #: the score metric that is the payoff
    metric: str
    kind: PayoffKind
    #: the widest possible difference between two payoffs (an outcome's is 1)
    range: float


@dataclass(frozen=True)
class TaskSpec:
    id: str
    title: str
    #: symmetric tasks have one role ("player") and a mean payoff per model; asymmetric ones one per model and role
    symmetric: bool
    #: role -> its payoff
    payoffs: dict[str, Payoff]
    #: role -> further metrics the report shows beside the payoff
    extras: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def roles(self) -> list[str]:
        return list(self.payoffs)


def public_goods_seats(rules: PublicGoods, players: int) -> int:
    """Three or more models play one game with a seat each (as in the paper); one or two models
    alternate over the configured seats."""
    return players if players >= 3 else rules.seats


def public_goods_range(rules: PublicGoods, seats: int) -> float:
    """A seat gains between alpha*E/N (gives all, nobody else gives) and E + alpha*(N-1)*E/N a round."""
    low = rules.alpha * rules.endowment / seats
    high = rules.endowment + rules.alpha * (seats - 1) * rules.endowment / seats
    return rules.rounds * (high - low)


def task_specs(public_goods: PublicGoods, players: int) -> list[TaskSpec]:
    """The six tasks for a run with `players` models (the public goods game's seats depend on it)."""
    coins = Payoff("payoff", "amount", public_goods_range(public_goods, public_goods_seats(public_goods, players)))
    points = Payoff("payoff", "outcome", 1.0)
    return [
        TaskSpec("public_goods_mode1", "public goods, mode 1 (own income)", True, {"player": coins},
                 {"player": ("violations",)}),
        TaskSpec("public_goods_mode2", "public goods, mode 2 (sorted investments)", True, {"player": coins},
                 {"player": ("violations",)}),
        TaskSpec("idiom_chain", "idiom chain (Chinese)", True, {"player": points}, {"player": ("hits",)}),
        TaskSpec("word_chain", "word chain (English)", True, {"player": points}, {"player": ("hits",)}),
        TaskSpec("code_review", "code review", False,
                 {"programmer": Payoff("rating:programmer", "amount", RATING_RANGE),
                  "reviewer": Payoff("rating:reviewer", "amount", RATING_RANGE)},
                 {"programmer": ("tests:programmer",), "reviewer": ("gain:reviewer",)}),
        TaskSpec("translation", "translation", False,
                 {"translator": Payoff("rating:translator", "amount", RATING_RANGE),
                  "proofreader": Payoff("rating:proofreader", "amount", RATING_RANGE)}),
    ]  # fmt: skip
