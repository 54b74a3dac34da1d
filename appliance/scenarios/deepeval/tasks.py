"""DeepEval's tasks: who plays which role, which stored score is each role's payoff, and its range."""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.scenarios.deepeval.settings import PublicGoods


@dataclass(frozen=True)
class TaskSpec:
    id: str
    title: str
    #: symmetric tasks have one role ("player") and a mean payoff per model; asymmetric ones one per model and role
    symmetric: bool
    #: role -> the score metric that is its payoff
    payoffs: dict[str, str]
    #: the widest possible payoff difference (stability is judged relative to it)
    payoff_range: float
    #: role -> further metrics the report shows beside the payoff
    extras: dict[str, tuple[str, ...]] = field(default_factory=dict)


def public_goods_range(rules: PublicGoods) -> float:
    """A seat gains between alpha*E/N (gives all, nobody else gives) and E + alpha*(N-1)*E/N a round."""
    low = rules.alpha * rules.endowment / rules.seats
    high = rules.endowment + rules.alpha * (rules.seats - 1) * rules.endowment / rules.seats
    return rules.rounds * (high - low)


def task_specs(public_goods: PublicGoods) -> list[TaskSpec]:
    goods = public_goods_range(public_goods)
    return [
        TaskSpec("public_goods_mode1", "public goods, mode 1 (own income)", True, {"player": "payoff"}, goods,
                 {"player": ("violations",)}),
        TaskSpec("public_goods_mode2", "public goods, mode 2 (sorted investments)", True, {"player": "payoff"}, goods,
                 {"player": ("violations",)}),
        TaskSpec("idiom_chain", "idiom chain (Chinese)", True, {"player": "payoff"}, 1.0, {"player": ("hits",)}),
        TaskSpec("word_chain", "word chain (English)", True, {"player": "payoff"}, 1.0, {"player": ("hits",)}),
        TaskSpec("code_review", "code review", False,
                 {"programmer": "tests:programmer", "reviewer": "rating:reviewer"}, 9.0,
                 {"programmer": ("rating:programmer",), "reviewer": ("gain:reviewer",)}),
        TaskSpec("translation", "translation", False,
                 {"translator": "rating:translator", "proofreader": "rating:proofreader"}, 9.0),
    ]  # fmt: skip
