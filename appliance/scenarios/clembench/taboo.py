"""Taboo: a describer makes a guesser find a word without saying it or its taboo words.

Parse rules (a break aborts): the describer's reply starts with "CLUE:", the
guesser's with "GUESS:". Game rule (a break loses, as in clembench): the clue
may not contain the target or a taboo word, compared as whole words after a
light suffix stemming ("cars" hits "car", "carpet" does not). Quality: 100 / n
when the word is found at turn n, else 0.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from appliance.scenarios.clembench.gamedata import load_toml, need, new_instance
from appliance.scenarios.clembench.games import Game, PublishedItem, register_game
from appliance.scenarios.clembench.instances import ClemInstance
from appliance.scenarios.clembench.master import GameTable, Outcome

CLUE_TAG = "CLUE:"
GUESS_TAG = "GUESS:"
_SUFFIXES = ("ingly", "edly", "ings", "ness", "ment", "ing", "ies", "ied", "ers", "est", "ed", "er", "es", "ly", "s")


def stem(word: str) -> str:
    """A crude English stem: enough to catch inflected forms of a taboo word."""
    word = word.lower()
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2]:  # "running" -> "runn" -> "run"
        word = word[:-1]
    return word.removesuffix("e") if len(word) > 3 else word


def words_of(text: str) -> list[str]:
    return re.findall(r"[^\W\d_]+", text.lower())


def taboo_hits(clue: str, forbidden: list[str]) -> list[str]:
    """The forbidden words that the clue uses (as whole words, modulo inflection)."""
    clue_stems = {stem(word) for word in words_of(clue)}
    return [word for word in forbidden if any(stem(part) in clue_stems for part in words_of(word))]


def normalise_guess(text: str) -> str:
    return " ".join(words_of(text))


async def play(table: GameTable, params: dict[str, Any]) -> Outcome:
    target: str = params["target"]
    related: list[str] = params["related"]
    max_turns = int(params["max_turns"])
    describer = table.seat("player", "describer", f"{CLUE_TAG} {table.sentence()}")
    guesser = table.seat("partner", "guesser", f"{GUESS_TAG} {max([target, *related], key=len)}")
    to_describer: str = params["describer_prompt"]
    guesser_intro: str = params["guesser_prompt"]
    guesses: list[str] = []
    for turn in range(max_turns):
        reply = await describer.ask(to_describer)
        if not reply.startswith(CLUE_TAG):
            raise table.requests.broken(f"describer reply does not start with {CLUE_TAG}")
        table.requests.ok()
        clue = reply.splitlines()[0]
        hits = taboo_hits(clue[len(CLUE_TAG) :], [target, *related])
        if hits:
            return Outcome("lose", 0.0, {"Clue Violation": 1.0, "Turns": float(turn + 1)})
        to_guesser = f"{guesser_intro}\n\n{clue}" if turn == 0 else clue
        answer = await guesser.ask(to_guesser)
        if not answer.startswith(GUESS_TAG):
            raise table.requests.broken(f"guesser reply does not start with {GUESS_TAG}")
        table.requests.ok()
        guess = normalise_guess(answer.splitlines()[0][len(GUESS_TAG) :])
        guesses.append(guess)
        if guess == target.lower():
            return Outcome("success", 100 / (turn + 1), {"Turns": float(turn + 1), **_repeats(guesses)})
        to_describer = f"{GUESS_TAG} {guess}"
    return Outcome("lose", 0.0, {"Turns": float(max_turns), **_repeats(guesses)})


def _repeats(guesses: list[str]) -> dict[str, float | None]:
    return {"Repetition-Guesser": float(len(guesses) - len(set(guesses)))}


def taboo_instances(folder: Path, rng: random.Random, count: int) -> list[ClemInstance]:
    path = folder / "taboo.toml"
    data = load_toml(path)
    prompts = need(data, "prompts", path)
    turns = int(data.get("max_turns", 3))
    instances = []
    for band, entries in need(data, "words", path).items():
        for index, entry in enumerate(rng.sample(entries, min(count, len(entries)))):
            taboo = need(entry, "taboo", path)
            params = {
                "target": need(entry, "target", path),
                "related": taboo,
                "max_turns": turns,
                "describer_prompt": need(prompts, "describer", path).format(
                    target=entry["target"], taboo="\n".join(f"- {word}" for word in taboo), turns=turns
                ),
                "guesser_prompt": need(prompts, "guesser", path).format(turns=turns),
            }
            instances.append(new_instance("taboo", band, index, params))
    return instances


def convert_published(published: PublishedItem) -> tuple[str, dict[str, Any]]:
    experiment, item = published.experiment, published.item
    turns = int(experiment["max_turns"])
    related = list(item["related_word"])
    describer = (
        experiment["describer_initial_prompt"]
        .replace("$TARGET_WORD$", item["target_word"])
        .replace("$REL_WORD$", "\n".join(f"- {word}" for word in related))
        .replace("$N$", str(turns))
    )
    return "taboo", {
        "target": item["target_word"],
        "related": related,
        "max_turns": turns,
        "describer_prompt": describer,
        "guesser_prompt": experiment["guesser_initial_prompt"].replace("$N$", str(turns)),
    }


async def play_instance(table: GameTable, instance: ClemInstance) -> Outcome:
    return await play(table, instance.params)


GAME = register_game(
    Game(
        name="taboo",
        play=play_instance,
        generate=taboo_instances,
        convert=convert_published,
        two_player=frozenset({"taboo"}),
        order=10,
    )
)
