"""Seeded instance generators: the benchmark is the game, so every seed gives fresh instances.

Each generator reads its templates and word lists from scenarios/clembench/
and renders complete instances (prompts and parse patterns included).
"""

from __future__ import annotations

import random
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError
from appliance.scenarios.clembench.grids import compact_shape, random_shape, render_grid
from appliance.scenarios.clembench.instances import GAMES, ClemInstance, InstanceSet

DEFAULT_PER_EXPERIMENT = 6


def load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ApplianceError(f"{path}: cannot read ({error.strerror})") from None
    except tomllib.TOMLDecodeError as error:
        raise ApplianceError(f"{path}: {error}") from None


def need(data: dict[str, Any], key: str, path: Path) -> Any:
    if key not in data:
        raise ApplianceError(f"{path}: missing field '{key}'")
    return data[key]


def _instance(game: str, experiment: str, index: int, params: dict[str, Any], language: str = "en") -> ClemInstance:
    return ClemInstance(
        id=f"{game}/{experiment}/{index}", game=game, experiment=experiment, params=params, language=language
    )


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
                instances.append(_instance(game, band, index, params))
    return instances


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
            instances.append(_instance("taboo", band, index, params))
    return instances


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
            instances.append(_instance("imagegame", experiment, index, params))
    return instances


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
                    "giver_pattern": rf"^{re.escape(need(spec, 'expression_tag', path))}\s*(?P<content>.+)",
                    "guesser_pattern": rf"^{re.escape(need(spec, 'answer_tag', path))}\s*"
                    rf"(?P<response>{'|'.join(map(re.escape, answers))}|1|2|3)\b",
                    "target_names": [answers[order.index(0)], str(order.index(0) + 1)],
                }
                instances.append(_instance("referencegame", f"{experiment}_{language}", index, params, language))
    return instances


def privateshared_params(
    data: dict[str, Any], path: Path, experiment: str, slots: dict[str, str], order: list[str], intro: str | None
) -> dict[str, Any]:
    """The parameters of one private/shared game; `intro` overrides ours (published instances bring theirs)."""
    spec = need(need(data, "experiments", path), experiment, path)
    tags = dict(need(data, "tags", path))
    tags["questioner"] = need(spec, "tag", path)

    def question(kind: str, slot: str) -> str:
        if kind in spec:
            return str(need(spec[kind], slot, path))
        return str(need(spec, f"{kind[:-1]}_template", path)).format(slot=slot)

    if intro is None:
        details = "\n".join(f"{slot.upper()}: {value}" for slot, value in slots.items())
        intro = need(need(data, "intro", path), "text", path).format(
            persona=spec["persona"], details=details, other=spec["other"], tag=tags["questioner"]
        )
    return {
        "slots": slots,
        "request_order": order,
        "intro": intro,
        "tags": tags,
        "requests": {slot: question("requests", slot) for slot in slots},
        "probes": {slot: f"{tags['me']} {question('probes', slot)}" for slot in slots},
        "probe_retries": data.get("probe_retries", 3),
        "retry_prefixes": data.get("retry_prefixes", []),
    }


def privateshared_instances(folder: Path, rng: random.Random, count: int) -> list[ClemInstance]:
    path = folder / "privateshared.toml"
    data = load_toml(path)
    instances = []
    for experiment, spec in need(data, "experiments", path).items():
        if "values" not in spec:
            continue
        for index in range(count):
            slots = {slot: rng.choice(values) for slot, values in spec["values"].items()}
            order = list(slots)
            rng.shuffle(order)
            params = privateshared_params(data, path, experiment, slots, order, None)
            instances.append(_instance("privateshared", experiment, index, params))
    return instances


GENERATORS: dict[str, Callable[[Path, random.Random, int], list[ClemInstance]]] = {
    "wordle": wordle_instances,
    "taboo": taboo_instances,
    "imagegame": imagegame_instances,
    "referencegame": referencegame_instances,
    "privateshared": privateshared_instances,
}


def generate_instance_set(folder: Path, seed: int, per_experiment: int = DEFAULT_PER_EXPERIMENT) -> InstanceSet:
    """Instances of every game from one seed (each generator draws from its own seeded stream)."""
    instances: list[ClemInstance] = []
    for name, generator in GENERATORS.items():
        instances.extend(generator(folder, random.Random(f"{seed}/{name}"), per_experiment))
    assert {i.game for i in instances} == set(GAMES)
    return InstanceSet(name=f"clembench-seed-{seed}", source=str(folder), seed=seed, instances=instances)
