"""`appliance import pingpong-settings`: PingPong's settings_v2.json as our cards and situations."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from appliance.errors import ApplianceError
from appliance.scenarios.pingpong.family import DEFAULT_TURNS, Card, Situation
from appliance.util.tomlfile import to_toml


def import_settings(settings_path: Path, out_folder: Path) -> tuple[int, int]:
    """Convert PingPong's settings_v2.json into our cards.toml and situations.toml."""
    try:
        settings = json.loads(settings_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ApplianceError(f"{settings_path}: file not found") from None
    except json.JSONDecodeError as error:
        raise ApplianceError(f"{settings_path}: not valid JSON: {error}") from None
    if not isinstance(settings, dict):
        raise ApplianceError(f"{settings_path}: expected an object keyed by language")
    cards: list[Card] = []
    situations: list[Situation] = []
    for language, block in settings.items():
        if not isinstance(block, dict) or "characters" not in block or "situations" not in block:
            raise ApplianceError(f"{settings_path}: field '{language}': needs 'characters' and 'situations'")
        cards += _cards(settings_path, language, block["characters"])
        situations += _situations(settings_path, language, block["situations"])
    out_folder.mkdir(parents=True, exist_ok=True)
    (out_folder / "cards.toml").write_text(to_toml({"card": [c.model_dump() for c in cards]}), encoding="utf-8")
    (out_folder / "situations.toml").write_text(
        to_toml({"situation": [s.model_dump() for s in situations]}), encoding="utf-8"
    )
    return len(cards), len(situations)


def _cards(settings_path: Path, language: str, characters: list[Any]) -> list[Card]:
    cards: list[Card] = []
    for index, character in enumerate(characters):
        where = f"{settings_path}: field '{language}.characters[{index}]'"
        try:
            name = character["char_name"]
            cards.append(
                Card(
                    id=f"{language}-{_slug(name)}-{index}",
                    language=language,
                    name=name,
                    summary=character.get("summary") or name,
                    description=character["system_prompt"],
                    greeting=character.get("greeting") or character.get("initial_message") or "",
                )
            )
        except (KeyError, TypeError, ValidationError) as error:
            raise ApplianceError(f"{where}: missing or invalid {error}") from None
    return cards


def _situations(settings_path: Path, language: str, entries: list[Any]) -> list[Situation]:
    situations: list[Situation] = []
    for index, situation in enumerate(entries):
        where = f"{settings_path}: field '{language}.situations[{index}]'"
        try:
            situations.append(
                Situation(
                    id=f"{language}-situation-{index}",
                    language=language,
                    text=situation["text"],
                    turns=int(situation.get("num_turns", DEFAULT_TURNS)),
                    tags=tuple(situation.get("tags", ())),
                )
            )
        except (KeyError, TypeError, ValueError, ValidationError) as error:
            raise ApplianceError(f"{where}: missing or invalid {error}") from None
    return situations


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "character"
