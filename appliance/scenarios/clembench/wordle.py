"""Wordle and its two variants: with a clue, and with a critic who reviews each guess.

Parse rules: the guesser's reply holds exactly one "guess:" line (and may hold
an "explanation:" line); the guess is one word of letters with the target's
length, else the episode aborts. A well-formed word that is not in the game's
word list is re-prompted up to `max_retries` times, then aborts. The critic
replies with one "agreement: yes|no" line. Quality (clembench's speed score):
wordle 100/100/100/50/30/20 for a win at attempt 1..6; the variants 100 / n.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.scenarios.clembench.gamedata import literal, load_toml, need, new_instance
from appliance.scenarios.clembench.games import Game, PublishedItem, register_game
from appliance.scenarios.clembench.instances import ClemInstance
from appliance.scenarios.clembench.master import Abort, GameTable, Outcome, Requests, Seat

SPEED_SCORES = {1: 100.0, 2: 100.0, 3: 100.0, 4: 50.0, 5: 30.0, 6: 20.0}


@dataclass(frozen=True)
class Keywords:
    guess: str = "guess:"
    explanation: str = "explanation:"
    agreement: str = "agreement:"
    feedback: str = "guess_feedback:"
    yes: str = "yes"
    no: str = "no"


def feedback(guess: str, target: str) -> list[str]:
    """Colour per letter: green (right place), yellow (elsewhere, counting repeats), red (absent)."""
    colours = ["red"] * len(guess)
    unmatched = Counter(t for g, t in zip(guess, target, strict=True) if g != t)
    for i, (g, t) in enumerate(zip(guess, target, strict=True)):
        if g == t:
            colours[i] = "green"
        elif unmatched[g] > 0:
            colours[i] = "yellow"
            unmatched[g] -= 1
    return colours


def render_feedback(guess: str, colours: list[str]) -> str:
    return " ".join(f"{letter}<{colour}>" for letter, colour in zip(guess, colours, strict=True))


def closeness(colours: list[str]) -> float:
    """clembench's per-turn closeness: 5 per green letter, 3 per yellow."""
    return float(sum(5 if c == "green" else 3 if c == "yellow" else 0 for c in colours))


def tagged_line(reply: str, tag: str) -> str:
    """The content of the single line starting with `tag`; raises ValueError if absent or repeated."""
    found = [line.strip()[len(tag) :].strip() for line in reply.splitlines() if line.strip().lower().startswith(tag)]
    if len(found) != 1:
        raise ValueError(f"expected exactly one '{tag}' line, found {len(found)}")
    return found[0]


class NotInWordList(Exception):
    """A well-formed guess the game does not know: the guesser may try again."""


def parse_guess(reply: str, keywords: Keywords, length: int, words: frozenset[str]) -> tuple[str, str]:
    """(guess, explanation); raises ValueError on a parse-rule break, NotInWordList on an unknown word."""
    guess = tagged_line(reply, keywords.guess).lower()
    try:
        explanation = tagged_line(reply, keywords.explanation)
    except ValueError:
        explanation = ""
    if not re.fullmatch(r"[a-z]+", guess):
        raise ValueError(f"guess '{guess}' is not a single word of letters")
    if len(guess) != length:
        raise ValueError(f"guess '{guess}' does not have {length} letters")
    if words and guess not in words:
        raise NotInWordList(guess)
    return guess, explanation


def parse_agreement(reply: str, keywords: Keywords) -> tuple[str, str]:
    agreement = tagged_line(reply, keywords.agreement).lower().strip(" .!")
    if agreement not in (keywords.yes, keywords.no):
        raise ValueError(f"agreement '{agreement}' is neither {keywords.yes} nor {keywords.no}")
    try:
        explanation = tagged_line(reply, keywords.explanation)
    except ValueError:
        explanation = ""
    return agreement, explanation


async def ask_for_guess(guesser: Seat, prompt: str, requests: Requests, game: dict[str, Any]) -> tuple[str, str]:
    """Ask until a guess is valid; unknown words are re-prompted up to the game's retry limit."""
    keywords: Keywords = game["keywords"]
    for _ in range(int(game["max_retries"]) + 1):
        reply = await guesser.ask(prompt)
        try:
            guess, explanation = parse_guess(reply, keywords, len(game["target"]), game["words"])
        except NotInWordList as unknown:
            requests.violated += 1
            prompt = game["texts"]["unknown_word"].format(guess=unknown)
            continue
        except ValueError as broken:
            raise requests.broken(str(broken)) from None
        requests.ok()
        return guess, explanation
    raise Abort("too many guesses outside the word list")


async def play(table: GameTable, params: dict[str, Any], variant: str) -> Outcome:
    """`variant` is "wordle", "wordle_withclue" or "wordle_withcritic"."""
    keywords = Keywords(**params.get("keywords", {}))
    target = params["target"].lower()
    game = {
        "keywords": keywords,
        "target": target,
        "words": frozenset(w.lower() for w in params.get("words", [])) | {target},
        "max_retries": params.get("max_retries", 5),
        "texts": params["texts"],
    }
    attempts = int(params.get("attempts", 6))
    explained = f"{keywords.explanation} {table.sentence()}\n"
    guesser = table.seat("player", "guesser", f"{explained}{keywords.guess} {'w' * len(target)}")
    critic = (
        table.seat("partner", "critic", f"{keywords.agreement} yes\n{explained}")
        if variant == "wordle_withcritic"
        else None
    )
    prompt = params["guesser_prompt"]
    guesses: list[str] = []
    turns: list[dict[str, float | None]] = []
    changed_after_critic = 0
    for attempt in range(1, attempts + 1):
        guess, explanation = await ask_for_guess(guesser, prompt, table.requests, game)
        if critic is not None:
            review = params["texts"]["to_critic"].format(guess=guess, explanation=explanation)
            if attempt == 1 and params["critic_prompt"]:  # the critic's instructions open its conversation
                review = f"{params['critic_prompt']}\n\n{review}"
            reply = await critic.ask(review)
            try:
                agreement, reason = parse_agreement(reply, keywords)
            except ValueError as broken:
                raise table.requests.broken(str(broken)) from None
            table.requests.ok()
            second = params["texts"]["critic_opinion"].format(agreement=agreement, explanation=reason)
            revised, explanation = await ask_for_guess(guesser, second, table.requests, game)
            changed_after_critic += int(revised != guess)
            guess = revised
        colours = feedback(guess, target)
        guesses.append(guess)
        turns.append({"closeness score": closeness(colours)})
        if guess == target:
            score = SPEED_SCORES[attempt] if variant == "wordle" else round(100 / attempt, 2)
            return Outcome("success", score, _extra(guesses, critic, changed_after_critic), turns)
        prompt = params["texts"]["feedback"].format(feedback=f"{keywords.feedback} {render_feedback(guess, colours)}")
    return Outcome("lose", 0.0, _extra(guesses, critic, changed_after_critic), turns)


def _extra(guesses: list[str], critic: Seat | None, changed: int) -> dict[str, float | None]:
    extra: dict[str, float | None] = {"Guess Repetitions": float(len(guesses) - len(set(guesses)))}
    if critic is not None:
        extra["Change-Of-Opinion"] = float(changed)
    return extra


def wordle_instances(folder: Path, rng: random.Random, count: int) -> list[ClemInstance]:
    path = folder / "wordle.toml"
    data = load_toml(path)
    prompts, texts = need(data, "prompts", path), need(data, "texts", path)
    words = need(need(data, "words", path), "accepted", path).split()
    instances = []
    for game in ("wordle", "wordle_withclue", "wordle_withcritic"):
        for band, targets in need(data, "targets", path).items():
            for index, entry in enumerate(rng.sample(targets, min(count, len(targets)))):
                clue = need(entry, "clue", path)
                params = {
                    "target": need(entry, "word", path),
                    "clue": clue,
                    "words": words,
                    "attempts": data.get("attempts", 6),
                    "max_retries": data.get("max_retries", 2),
                    "guesser_prompt": prompts["guesser"]
                    if game == "wordle"
                    else need(prompts, "guesser_clue", path).format(clue=clue),
                    "critic_prompt": need(prompts, "critic", path).format(clue=clue),
                    "texts": texts,
                }
                instances.append(new_instance(game, band, index, params))
    return instances


def convert_published(published: PublishedItem) -> tuple[str, dict[str, Any]]:
    experiment, item = published.experiment, published.item
    ours = load_toml(published.data_folder / "wordle.toml")
    game = (
        "wordle_withcritic"
        if experiment.get("use_critic")
        else "wordle_withclue"
        if experiment.get("use_clue")
        else "wordle"
    )
    keywords = literal(experiment.get("lang_keywords", "{}"))
    config = literal(experiment.get("common_config", "{}"))
    retries = config.get("max_retry_per_error", {})
    clue = item.get("target_word_clue", "")
    guesser = experiment["guesser_prompt"].replace("$CLUE$", clue)
    params = {
        "target": item["target_word"],
        "clue": clue,
        "words": keywords.get("official_words_list") or ours["words"]["accepted"].split(),
        "attempts": config.get("n_turns", 6),
        "max_retries": retries.get("NOT_VALID_WORD_FOR_GAME", 5) if isinstance(retries, dict) else retries,
        "guesser_prompt": guesser,
        "critic_prompt": experiment.get("guesser_critic_prompt", "").replace("$CLUE$", clue),
        "texts": ours["texts"],
    }
    return game, params


async def play_instance(table: GameTable, instance: ClemInstance) -> Outcome:
    return await play(table, instance.params, instance.game)


GAME = register_game(
    Game(
        name="wordle",
        play=play_instance,
        generate=wordle_instances,
        convert=convert_published,
        variants=("wordle", "wordle_withclue", "wordle_withcritic"),
        two_player=frozenset({"wordle_withcritic"}),
        order=0,
    )
)
