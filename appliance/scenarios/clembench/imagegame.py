"""The drawing game: an instruction giver describes a grid; a follower draws it cell by cell.

Parse rules: the giver's reply matches the instance's instruction pattern or
its done pattern; the follower's reply is a whole grid (the instance's grid
pattern). Quality: F1 of the filled cells of the last drawn grid against the
target (success at F1 >= 99), as clembench scores it.
"""

from __future__ import annotations

import re
from typing import Any

from appliance.scenarios.clembench.grids import cell_f1, parse_grid
from appliance.scenarios.clembench.master import Outcome, Table


async def play(table: Table, params: dict[str, Any]) -> Outcome:
    target = parse_grid(params["target_grid"])
    instruction = re.compile(params["giver_pattern"], re.IGNORECASE)
    done = re.compile(params["done_pattern"], re.IGNORECASE)
    grid_pattern = re.compile(params["follower_pattern"])
    giver = table.seat("player", "instruction giver", 64)
    follower = table.seat("partner", "instruction follower", 64)
    to_giver: str = params["giver_prompt"]
    drawn = None
    turns: list[dict[str, float | None]] = []
    for turn in range(int(params["max_turns"])):
        command = await giver.ask(to_giver)
        if done.match(command):
            table.requests.ok()
            break
        if not instruction.match(command):
            raise table.requests.broken("the giver's reply is neither an instruction nor the done command")
        table.requests.ok()
        line = command.splitlines()[0]
        reply = await follower.ask(f"{params['follower_prompt']}\n\n{line}" if turn == 0 else line)
        if not grid_pattern.match(reply):
            raise table.requests.broken("the follower's reply is not a grid")
        try:
            drawn = parse_grid(reply)
        except ValueError as broken:
            raise table.requests.broken(str(broken)) from None
        table.requests.ok()
        precision, recall, f1 = cell_f1(target, drawn)
        turns.append({"Precision": precision, "Recall": recall, "F1": f1})
        to_giver = params["next_question"]
    f1 = cell_f1(target, drawn)[2] if drawn is not None else 0.0
    extra: dict[str, float | None] = {"F1": f1, "Turns": float(len(turns))}
    return Outcome("success" if f1 >= 99 else "lose", f1, extra, turns)
