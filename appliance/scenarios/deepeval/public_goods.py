"""The public goods game (symmetric): N seats invest 0..endowment coins a round, simultaneously.

Three or more models play one game with a seat each (the paper's setting);
one or two models alternate over the configured seats.

The pool is multiplied by alpha and shared equally by all seats; a seat's
payoff is the coins it owns after the last round. Mode 1 tells each seat its
income from the pool after a round, mode 2 the investments sorted from
largest to smallest. A reply whose amount is not a whole number in range
counts as investing nothing and is recorded as a rule violation.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from appliance.catalog.sampling import Sampling
from appliance.episodes.context import EpisodeContext, table_role
from appliance.scenarios.deepeval.payoffs import seat_scores
from appliance.scenarios.deepeval.referee import Referee, Seat
from appliance.scenarios.deepeval.settings import DeepEvalSettings, PublicGoods


@dataclass(frozen=True)
class Investment:
    amount: int
    reason: str
    #: the reply broke the rules (not JSON, or an amount outside 0..endowment); `amount` is then 0
    violation: bool


@dataclass(frozen=True)
class RoundResult:
    #: the pool's share every seat receives: alpha x total investment / seats
    income: float
    #: what each seat gained this round: endowment - investment + income
    gains: list[float]


def parse_investment(text: str, endowment: int) -> Investment:
    try:
        data = json.loads(text.strip())
    except json.JSONDecodeError:
        return Investment(0, "", True)
    if not isinstance(data, dict):
        return Investment(0, "", True)
    amount, reason = data.get("coins"), data.get("reason")  # the paper's keys: a reason, then the coins
    reason_text = reason if isinstance(reason, str) else ""
    if isinstance(amount, bool) or not isinstance(amount, int) or not 0 <= amount <= endowment:
        return Investment(0, reason_text, True)
    return Investment(amount, reason_text, False)


def settle_round(amounts: list[int], endowment: int, alpha: float) -> RoundResult:
    income = alpha * sum(amounts) / len(amounts)
    return RoundResult(income, [endowment - amount + income for amount in amounts])


def investment_grammar(reason_max_chars: int) -> str:
    """JSON with a short reason and a whole number of up to three digits: the shape is forced,
    whether the amount is within the rules is still the player's choice."""
    return "\n".join(
        [
            f'root ::= "{{\\"reason\\": \\"" char{{0,{reason_max_chars}}} "\\", \\"coins\\": " number "}}"',
            "number ::= [0-9] | [1-9] [0-9] | [1-9] [0-9] [0-9]",
            'char ::= [^"\\\\\\x00-\\x1f]',
        ]
    )


def seat_bindings(seats: int, table: tuple[str, ...], order_seed: int) -> list[str]:
    """The episode role behind each seat. An N-model table gives every model one seat, in an order
    shuffled by `order_seed`; otherwise the pairing's two models alternate over `seats` seats (one
    model in self-play)."""
    if table:
        order = list(table)
        random.Random(order_seed).shuffle(order)
        return [table_role(model) for model in order]
    return ["player" if index % 2 == 0 else "partner" for index in range(seats)]


async def play_public_goods(ctx: EpisodeContext, settings: DeepEvalSettings, mode: int) -> None:
    """Play one game; each model's payoff is the mean final coins of its seats, beside its violations."""
    rules = settings.public_goods
    rounds = min(rules.rounds, ctx.max_turns or rules.rounds)  # a run's --turns caps the rounds too
    bindings = seat_bindings(rules.seats, ctx.table, ctx.seed)
    names = [f"Player {index + 1}" for index in range(len(bindings))]
    facts = {"seats": str(len(names)), "rounds": str(rounds), "endowment": str(rules.endowment)}
    facts["alpha"] = f"{rules.alpha:g}"
    seats = [
        Seat(name, binding, rules.system.format(player=name, **facts))
        for name, binding in zip(names, bindings, strict=True)
    ]
    referee = Referee(ctx, seats)
    for name in names:
        referee.post(rules.first_round.format(**facts), [name])
    referee.end_round()
    owned = dict.fromkeys(names, 0.0)
    violations = dict.fromkeys(names, 0)
    history: list[dict[str, object]] = []
    sampling = Sampling(temperature=settings.players.temperature, max_tokens=rules.max_tokens)
    for number in range(1, rounds + 1):
        replies = await referee.collect(names, sampling=sampling, grammar=investment_grammar(rules.reason_max_chars))
        investments = [parse_investment(replies[name], rules.endowment) for name in names]
        result = settle_round([i.amount for i in investments], rules.endowment, rules.alpha)
        for name, investment, gain in zip(names, investments, result.gains, strict=True):
            owned[name] += gain
            violations[name] += investment.violation
        history.append({"amounts": [i.amount for i in investments], "violations": [i.violation for i in investments]})
        for name, investment in zip(names, investments, strict=True):
            messages = [_feedback(rules, mode, number, result, investments, owned[name])]
            if investment.violation:
                messages.append(rules.invalid_amount.format(endowment=rules.endowment))
            if number < rounds:
                messages.append(rules.next_round.format(**{**facts, "round": str(number + 1)}))
            referee.post("\n".join(messages), [name])
        referee.end_round()
    ctx.metadata.update(task_rounds=history, seat_payoffs=owned, seat_violations=violations)
    ctx.scores += [
        *seat_scores(referee.models, owned, "payoff"),
        *seat_scores(referee.models, violations, "violations"),
    ]


def _feedback(
    rules: PublicGoods, mode: int, number: int, result: RoundResult, investments: list[Investment], total: float
) -> str:
    if mode == 1:
        return rules.feedback_mode1.format(round=number, income=_coins(result.income), total=_coins(total))
    ranked = sorted((i.amount for i in investments), reverse=True)
    return rules.feedback_mode2.format(round=number, investments=ranked, total=_coins(total))


def _coins(value: float) -> str:
    return f"{round(value, 2):g}"
