"""clembench's published instances (`<game>/instances.json`), played as they are.

Their prompts and parse patterns are used verbatim. What the files do not
carry comes from our data: the wordle feedback texts (and our word list where
an experiment brings none), and the private/shared request and probe
questions (clembench keeps those in resource files outside instances.json).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError
from appliance.scenarios.clembench.generate import load_toml, privateshared_params
from appliance.scenarios.clembench.instances import GAMES, ClemInstance, InstanceSet


def _literal(value: Any) -> Any:
    """Some published fields are Python reprs of dicts rather than JSON."""
    return ast.literal_eval(value) if isinstance(value, str) else value


def _wordle(experiment: dict[str, Any], item: dict[str, Any], ours: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    game = (
        "wordle_withcritic"
        if experiment.get("use_critic")
        else "wordle_withclue"
        if experiment.get("use_clue")
        else "wordle"
    )
    keywords = _literal(experiment.get("lang_keywords", "{}"))
    config = _literal(experiment.get("common_config", "{}"))
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


def _taboo(experiment: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    turns = int(experiment["max_turns"])
    related = list(item["related_word"])
    describer = (
        experiment["describer_initial_prompt"]
        .replace("$TARGET_WORD$", item["target_word"])
        .replace("$REL_WORD$", "\n".join(f"- {word}" for word in related))
        .replace("$N$", str(turns))
    )
    return {
        "target": item["target_word"],
        "related": related,
        "max_turns": turns,
        "describer_prompt": describer,
        "guesser_prompt": experiment["guesser_initial_prompt"].replace("$N$", str(turns)),
    }


def _imagegame(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "target_grid": item["target_grid"],
        "giver_prompt": f"{item['player_1_prompt_header']}\n{item['target_grid']}\n{item['player_1_question']}",
        "follower_prompt": item["player_2_prompt_header"],
        "next_question": item["player_1_question"],
        "giver_pattern": item["player_1_response_pattern"],
        "done_pattern": item["player_1_terminate_pattern"],
        "follower_pattern": item["player_2_response_pattern"],
        "max_turns": 2 * int(item.get("grid_dimension", 5)) ** 2,  # clembench's own round limit
    }


def _referencegame(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "giver_prompt": item["player_1_prompt_header"],
        "guesser_prompt": item["player_2_prompt_header"],
        "giver_pattern": item["player_1_response_pattern"],
        "guesser_pattern": item["player_2_response_pattern"],
        "target_names": list(item["target_grid_name"]),
    }


def read_published(path: Path, folder: Path) -> InstanceSet:
    """`path` is one game's instances.json or a folder holding `<game>/instances.json`."""
    files = [path] if path.is_file() else sorted(path.glob("*/instances.json"))
    if not files:
        raise ApplianceError(f"{path}: no instances.json (expected a file or a folder of <game>/instances.json)")
    wordle = load_toml(folder / "wordle.toml")
    private = load_toml(folder / "privateshared.toml")
    instances: list[ClemInstance] = []
    for file in files:
        game_folder = file.parent.name
        try:
            experiments = json.loads(file.read_text(encoding="utf-8"))["experiments"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
            raise ApplianceError(f"{file}: not a clembench instances file ({error})") from None
        for experiment in experiments:
            for item in experiment["game_instances"]:
                try:
                    game, params = _convert(game_folder, experiment, item, wordle, private, folder)
                except KeyError as missing:
                    raise ApplianceError(
                        f"{file}: experiment '{experiment.get('name')}' game {item.get('game_id')}: "
                        f"missing field {missing}"
                    ) from None
                instances.append(
                    ClemInstance(
                        id=f"{game}/{experiment['name']}/{item['game_id']}",
                        game=game,
                        experiment=experiment["name"],
                        params=params,
                        language=item.get("lang", "en"),
                    )
                )
    return InstanceSet(name=f"clembench-published-{path.name}", source=str(path.resolve()), instances=instances)


def _convert(
    game_folder: str,
    experiment: dict[str, Any],
    item: dict[str, Any],
    wordle: dict[str, Any],
    private: dict[str, Any],
    folder: Path,
) -> tuple[str, dict[str, Any]]:
    if game_folder == "wordle" or game_folder.startswith("wordle_"):
        return _wordle(experiment, item, wordle)
    if game_folder == "taboo":
        return "taboo", _taboo(experiment, item)
    if game_folder == "imagegame":
        return "imagegame", _imagegame(item)
    if game_folder == "referencegame":
        return "referencegame", _referencegame(item)
    if game_folder == "privateshared":
        params = privateshared_params(
            private,
            folder / "privateshared.toml",
            experiment["name"],
            dict(item["slots"]),
            list(item["request_order"]),
            item["initial_prompt"],
        )
        params["tags"]["questioner"] = f"{item['tag']}:"
        return "privateshared", params
    raise ApplianceError(f"{game_folder}: not a game the appliance plays (known: {', '.join(GAMES)})")
