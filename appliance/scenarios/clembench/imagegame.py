"""The drawing game: an instruction giver describes a grid; a follower draws it cell by cell.

Parse rules: the giver's reply matches the instance's instruction pattern or
its done pattern; the follower's reply is a whole grid (the instance's grid
pattern). Quality: F1 of the filled cells of the last drawn grid against the
target (success at F1 >= 99), as clembench scores it.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from appliance.scenarios.clembench.gamedata import load_toml, need, new_instance
from appliance.scenarios.clembench.games import Game, PublishedItem, register_game
from appliance.scenarios.clembench.grids import (
    cell_f1,
    compact_shape,
    parse_grid,
    random_shape,
    render_grid,
    widest_grids,
)
from appliance.scenarios.clembench.instances import ClemInstance
from appliance.scenarios.clembench.master import GameTable, Outcome


async def play(table: GameTable, params: dict[str, Any]) -> Outcome:
    target = parse_grid(params["target_grid"])
    instruction = re.compile(params["giver_pattern"], re.IGNORECASE)
    done = re.compile(params["done_pattern"], re.IGNORECASE)
    grid_pattern = re.compile(params["follower_pattern"])
    giver = table.seat("player", "instruction giver", f"instruction: {table.sentence()}")
    follower = table.seat("partner", "instruction follower", *widest_grids(target))
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


def imagegame_instances(folder: Path, rng: random.Random, count: int) -> list[ClemInstance]:
    path = folder / "imagegame.toml"
    data = load_toml(path)
    prompts = need(data, "prompts", path)
    letters = need(data, "letters", path)
    instances = []
    for experiment in ("compact_grids", "random_grids"):
        for index in range(count):
            letter = rng.choice(letters)
            grid = compact_shape(rng, letter) if experiment == "compact_grids" else random_shape(rng, letters, 6)
            params = {
                "target_grid": render_grid(grid),
                "giver_prompt": need(prompts, "giver", path).format(grid=render_grid(grid)),
                "follower_prompt": need(prompts, "follower", path),
                "next_question": need(prompts, "next_question", path),
                "giver_pattern": need(data, "giver_pattern", path),
                "done_pattern": need(data, "done_pattern", path),
                "follower_pattern": need(data, "follower_pattern", path),
                "max_turns": data.get("max_turns", 12),
            }
            instances.append(new_instance("imagegame", experiment, index, params))
    return instances


def convert_published(published: PublishedItem) -> tuple[str, dict[str, Any]]:
    item = published.item
    return "imagegame", {
        "target_grid": item["target_grid"],
        "giver_prompt": f"{item['player_1_prompt_header']}\n{item['target_grid']}\n{item['player_1_question']}",
        "follower_prompt": item["player_2_prompt_header"],
        "next_question": item["player_1_question"],
        "giver_pattern": item["player_1_response_pattern"],
        "done_pattern": item["player_1_terminate_pattern"],
        "follower_pattern": item["player_2_response_pattern"],
        "max_turns": 2 * int(item.get("grid_dimension", 5)) ** 2,  # clembench's own round limit
    }


async def play_instance(table: GameTable, instance: ClemInstance) -> Outcome:
    return await play(table, instance.params)


GAME = register_game(
    Game(
        name="imagegame",
        play=play_instance,
        generate=imagegame_instances,
        convert=convert_published,
        two_player=frozenset({"imagegame"}),
        order=20,
    )
)
