"""The reference game: one player describes the first of three grids; the other picks it out.

Parse rules: the giver's reply matches the instance's expression pattern and
the guesser's its answer pattern (the answer pattern names the picked grid in
a `response` group, as clembench's instances do). Quality: 100 if the guesser picks the target, else 0.
"""

from __future__ import annotations

import re
from typing import Any

from appliance.scenarios.clembench.master import Outcome, Table


async def play(table: Table, params: dict[str, Any]) -> Outcome:
    giver = table.seat("player", "instruction giver", 48)
    guesser = table.seat("partner", "guesser", 16)
    expression_reply = await giver.ask(params["giver_prompt"])
    expression = re.match(params["giver_pattern"], expression_reply, re.IGNORECASE)
    if expression is None:
        raise table.requests.broken("the giver's reply does not start with the expression tag")
    table.requests.ok()
    described = expression_reply.splitlines()[0]  # the tagged line, as the guesser's prompt expects
    answer_reply = await guesser.ask(params["guesser_prompt"].replace("TARGET_EXPRESSION", described))
    answer = re.match(params["guesser_pattern"], answer_reply, re.IGNORECASE)
    if answer is None:
        raise table.requests.broken("the guesser's reply does not name a grid after the answer tag")
    table.requests.ok()
    picked = answer.group("response").strip().lower()
    correct = picked in [name.lower() for name in params["target_names"]]
    extra: dict[str, float | None] = {"Generated Expression Length": float(len(described))}
    return Outcome("success" if correct else "lose", 100.0 if correct else 0.0, extra)
