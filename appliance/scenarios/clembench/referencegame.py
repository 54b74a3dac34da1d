"""The reference game: one player describes the first of three grids; the other picks it out.

Parse rules: the giver's reply matches the instance's expression pattern and
the guesser's its answer pattern (the answer pattern names the picked grid in
a `response` group, as clembench's instances do). Quality: 100 if the guesser picks the target, else 0.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from appliance.scenarios.clembench.gamedata import load_toml, need, new_instance
from appliance.scenarios.clembench.games import Game, PublishedItem, register_game
from appliance.scenarios.clembench.grids import compact_shape, random_shape, render_grid
from appliance.scenarios.clembench.instances import ClemInstance
from appliance.scenarios.clembench.master import GameTable, Outcome


async def play(table: GameTable, params: dict[str, Any]) -> Outcome:
    # published instances carry only regular expressions: their tags are measured as English's
    expression_tag = params.get("expression_tag", "Expression:")
    giver = table.seat("player", "instruction giver", f"{expression_tag} {table.sentence()}")
    answers = [f"{params.get('answer_tag', 'Answer:')} {answer}" for answer in params.get("answers", ["third"])]
    guesser = table.seat("partner", "guesser", *answers)
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
    picked = answer.group("response").strip()
    # the pattern's own case rule: "İkinci" is "ikinci" there, while str.lower() gives "i̇kinci"
    correct = any(re.fullmatch(re.escape(name), picked, re.IGNORECASE) for name in params["target_names"])
    extra: dict[str, float | None] = {"Generated Expression Length": float(len(described))}
    return Outcome("success" if correct else "lose", 100.0 if correct else 0.0, extra)


FULLWIDTH_COLON = "\uff1a"


def tag_pattern(tag: str) -> str:
    """The tag as written, its closing colon ASCII or full-width: a Chinese or Japanese reply may use either."""
    return re.escape(tag[:-1]) + f"[:{FULLWIDTH_COLON}]" if tag.endswith((":", FULLWIDTH_COLON)) else re.escape(tag)


def referencegame_instances(folder: Path, rng: random.Random, count: int) -> list[ClemInstance]:
    path = folder / "referencegame.toml"
    data = load_toml(path)
    letter = data.get("letter", "X")
    instances = []
    for experiment in ("compact_grids", "random_grids"):
        for index in range(count):
            grids: list[str] = []
            while len(grids) < 3:  # three distinct grids: a target and two distractors
                shape = compact_shape(rng, letter) if experiment == "compact_grids" else random_shape(rng, letter, 8)
                if render_grid(shape) not in grids:
                    grids.append(render_grid(shape))
            order = [0, 1, 2]
            rng.shuffle(order)
            for language, spec in need(data, "languages", path).items():
                answers = need(spec, "answers", path)
                params = {
                    "giver_prompt": need(spec, "giver", path).format(
                        target=grids[0], distractor_1=grids[1], distractor_2=grids[2]
                    ),
                    "guesser_prompt": need(spec, "guesser", path).format(
                        first=grids[order[0]], second=grids[order[1]], third=grids[order[2]]
                    ),
                    "giver_pattern": rf"^{tag_pattern(need(spec, 'expression_tag', path))}\s*(?P<content>.+)",
                    "guesser_pattern": rf"^{tag_pattern(need(spec, 'answer_tag', path))}\s*"
                    rf"(?P<response>{'|'.join(map(re.escape, answers))}|1|2|3)"
                    + (r"\b" if spec.get("answer_ends_word", True) else ""),
                    "target_names": [answers[order.index(0)], str(order.index(0) + 1)],
                    "expression_tag": need(spec, "expression_tag", path),
                    "answer_tag": need(spec, "answer_tag", path),
                    "answers": answers,
                }
                instances.append(new_instance("referencegame", f"{experiment}_{language}", index, params, language))
    return instances


def convert_published(published: PublishedItem) -> tuple[str, dict[str, Any]]:
    item = published.item
    return "referencegame", {
        "giver_prompt": item["player_1_prompt_header"],
        "guesser_prompt": item["player_2_prompt_header"],
        "giver_pattern": item["player_1_response_pattern"],
        "guesser_pattern": item["player_2_response_pattern"],
        "target_names": list(item["target_grid_name"]),
    }


async def play_instance(table: GameTable, instance: ClemInstance) -> Outcome:
    return await play(table, instance.params)


GAME = register_game(
    Game(
        name="referencegame",
        play=play_instance,
        generate=referencegame_instances,
        convert=convert_published,
        two_player=frozenset({"referencegame"}),
        order=30,
    )
)
