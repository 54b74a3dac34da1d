"""Importing PingPong's own settings_v2.json (read from ../shared, never copied)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.errors import ApplianceError
from appliance.scenarios.pingpong.family import PingPongFamily
from appliance.scenarios.pingpong.importer import import_settings

REPO = Path(__file__).resolve().parent.parent
SETTINGS = REPO.parent / "shared" / "datasets" / "peers" / "pingpong" / "settings_v2.json"


@pytest.mark.skipif(not SETTINGS.is_file(), reason=f"PingPong settings not found at {SETTINGS} (no ../shared)")
def test_import_converts_every_character_and_situation(tmp_path: Path) -> None:
    original = json.loads(SETTINGS.read_text(encoding="utf-8"))
    cards, situations = import_settings(SETTINGS, tmp_path)
    assert cards == sum(len(block["characters"]) for block in original.values())
    assert situations == sum(len(block["situations"]) for block in original.values())
    family = PingPongFamily.load(tmp_path, REPO / "judges", prompts_folder=REPO / "scenarios" / "pingpong")
    names = {card.name for card in family.cards}
    assert {c["char_name"] for block in original.values() for c in block["characters"]} == names
    per_language = {lang: len(b["characters"]) * len(b["situations"]) for lang, b in original.items()}
    assert len(family.instances()) == sum(per_language.values())
    greetings = {
        c["char_name"]: c.get("greeting") or c.get("initial_message") or ""
        for block in original.values()
        for c in block["characters"]
    }
    assert {card.name: card.greeting for card in family.cards} == greetings


def test_import_rejects_a_malformed_file(tmp_path: Path) -> None:
    broken = tmp_path / "settings.json"
    broken.write_text(json.dumps({"en": {"characters": [{"system_prompt": "x"}], "situations": []}}))
    with pytest.raises(ApplianceError, match=r"en\.characters\[0\]"):
        import_settings(broken, tmp_path / "out")
    broken.write_text("{not json")
    with pytest.raises(ApplianceError, match="not valid JSON"):
        import_settings(broken, tmp_path / "out")
