"""Seeded instance sets: the benchmark is the game, so every seed gives fresh instances.

Each game's generator (in its own module) reads its templates and word lists
from scenarios/clembench/ and renders complete instances, prompts and parse
patterns included.
"""

from __future__ import annotations

import random
from pathlib import Path

from appliance.scenarios.clembench.games import all_games
from appliance.scenarios.clembench.instances import ClemInstance, InstanceSet

DEFAULT_PER_EXPERIMENT = 6


def generate_instance_set(folder: Path, seed: int, per_experiment: int = DEFAULT_PER_EXPERIMENT) -> InstanceSet:
    """Instances of every game from one seed (each game draws from its own seeded stream)."""
    instances: list[ClemInstance] = []
    for game in all_games():
        instances.extend(game.generate(folder, random.Random(f"{seed}/{game.name}"), per_experiment))
    return InstanceSet(name=f"clembench-seed-{seed}", source=str(folder), seed=seed, instances=instances)
