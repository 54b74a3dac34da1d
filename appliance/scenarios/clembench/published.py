"""clembench's published instances (`<game>/instances.json`), played as they are.

Their prompts and parse patterns are used verbatim. What the files do not
carry comes from our data: the wordle feedback texts (and our word list where
an experiment brings none), and the private/shared request and probe
questions (clembench keeps those in resource files outside instances.json).
"""

from __future__ import annotations

import json
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.scenarios.clembench.games import GAMES, PublishedItem, game_of_folder
from appliance.scenarios.clembench.instances import ClemInstance, InstanceSet


def read_published(path: Path, folder: Path) -> InstanceSet:
    """`path` is one game's instances.json or a folder holding `<game>/instances.json`."""
    files = [path] if path.is_file() else sorted(path.glob("*/instances.json"))
    if not files:
        raise ApplianceError(f"{path}: no instances.json (expected a file or a folder of <game>/instances.json)")
    instances: list[ClemInstance] = []
    for file in files:
        game_folder = file.parent.name
        if game_folder not in GAMES.known():
            raise ApplianceError(
                f"{file}: its folder '{game_folder}' names no game the appliance plays "
                f"(known: {', '.join(sorted(GAMES.known()))}); put it in <game>/instances.json"
            )
        try:
            experiments = json.loads(file.read_text(encoding="utf-8"))["experiments"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
            raise ApplianceError(f"{file}: not a clembench instances file ({error})") from None
        for experiment in experiments:
            for item in experiment["game_instances"]:
                try:
                    game, params = game_of_folder(game_folder).convert(
                        PublishedItem(game_folder, experiment, item, folder)
                    )
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
