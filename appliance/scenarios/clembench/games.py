"""The clembench games: each game module registers one `Game` record, nothing here lists them.

A record says how the game master plays an instance, how fresh instances are
generated from a seed, how clembench's published instances convert, and which
of its variants are two-player. A new game is one module in this package.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.scenarios.clembench.instances import ClemInstance
from appliance.scenarios.clembench.master import GameTable, Outcome
from appliance.util.plugins import Registry, import_submodules


@dataclass(frozen=True)
class PublishedItem:
    """One game instance of a published clembench instances.json."""

    #: the game folder it came from (e.g. "wordle_withclue")
    game_folder: str
    experiment: dict[str, Any]
    item: dict[str, Any]
    #: our data folder (scenarios/clembench/), for what the published files do not carry
    data_folder: Path


@dataclass(frozen=True)
class Game:
    name: str
    #: plays one instance to its end (a parse-rule break raises `Abort`)
    play: Callable[[GameTable, ClemInstance], Awaitable[Outcome]]
    #: (data folder, seeded stream, instances per experiment) -> fresh instances
    generate: Callable[[Path, random.Random, int], list[ClemInstance]]
    #: a published instance -> (variant, our parameters)
    convert: Callable[[PublishedItem], tuple[str, dict[str, Any]]]
    #: the `game` values of the instances it plays (default: its name)
    variants: tuple[str, ...] = ()
    #: variants where a second model plays the partner role (cross-play pairs them)
    two_player: frozenset[str] = frozenset()
    #: position in instance sets and reports
    order: int = 100

    def plays(self) -> tuple[str, ...]:
        return self.variants or (self.name,)


#: every playable variant -> its game (a game registers under each of its variants)
GAMES: Registry[Game] = Registry("game", lambda: import_submodules("appliance.scenarios.clembench"))


def register_game(game: Game) -> Game:
    for variant in game.plays():
        GAMES.add(variant, game)
    return game


def all_games() -> list[Game]:
    """Every game once, in play order."""
    unique = {id(game): game for game in GAMES.known().values()}
    return sorted(unique.values(), key=lambda game: (game.order, game.name))


def variant_names() -> list[str]:
    """Every playable `game` value, in play order."""
    return [variant for game in all_games() for variant in game.plays()]


def game_of(variant: str) -> Game:
    return GAMES.get(variant)


def game_of_folder(folder: str) -> Game:
    """The game that converts a published `<folder>/instances.json`."""
    return GAMES.get(folder, f"{folder}: not a game the appliance plays")
