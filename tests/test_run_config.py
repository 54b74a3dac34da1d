"""A family's own settings are one field of the run config (`families`), and configs stored before it load alike.

Runs stored before kept the family's snapshot under `family_settings` (by scenario) and the options the
user set under `family_options` (by family name). Both must still load, resume and report: the stores
are the lab's records.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from appliance.catalog.panels import Panel
from appliance.run_config import FamilySettings, RunConfig
from appliance.scenarios import load_run_family
from appliance.scenarios.registry import FAMILIES
from appliance.store import Store
from appliance.store.run_view import RunView
from tests.fakes import store_hand_run

SNAPSHOT = {"tolerance": 0.05, "repetitions": {"initial": 2}}


def _config(**fields: Any) -> dict[str, Any]:
    """A stored config (as JSON holds it) of a run of `recall`, `recall:FOLDER` and `deepeval`."""
    base = RunConfig(
        scenarios=["recall", "recall:elsewhere", "deepeval"],
        players=["smollm2-135m"],
        interrogator="smollm2-135m",
        panel=Panel(name="p", judges=["smollm2-135m"]),
        models_file="models.toml",
    ).model_dump(mode="json", exclude={"families"})
    return base | fields


def test_a_config_stored_before_families_loads_as_it_would_be_stored_now() -> None:
    older = _config(family_settings={"deepeval": SNAPSHOT}, family_options={"recall": {"answer_tokens": 2}})
    loaded = RunConfig.model_validate(older)
    two_tokens = FamilySettings(options={"answer_tokens": 2})
    # the options were the family's: every scenario of it plays with them
    assert loaded.families == {
        "deepeval": FamilySettings(snapshot=SNAPSHOT),
        "recall": two_tokens,
        "recall:elsewhere": two_tokens,
    }
    stored_now = loaded.model_dump(mode="json")
    assert "family_settings" not in stored_now and "family_options" not in stored_now
    assert RunConfig.model_validate(stored_now) == loaded
    assert loaded.family_settings("clembench") == FamilySettings()
    with pytest.raises(ValueError, match="families"):  # the new field checks its values
        RunConfig.model_validate(_config(families={"recall": {"option": {"answer_tokens": 2}}}))


def test_a_run_view_reads_either_shape_from_the_store(tmp_path: Path) -> None:
    with Store.open(tmp_path / "store.duckdb") as store:
        store_hand_run(store, "older", _config(family_settings={"deepeval": SNAPSHOT}), [])
        newer = _config(families={"deepeval": {"options": {}, "snapshot": SNAPSHOT}})
        store_hand_run(store, "newer", newer, [])
        seen = {run: RunView(store, run, "deepeval").family_settings() for run in ("older", "newer")}
        assert store.run("older").run_config() == store.run("newer").run_config()
        absent = RunView(store, "older", "recall").family_settings()
    assert seen["older"] == seen["newer"] == FamilySettings(snapshot=SNAPSHOT)
    assert absent == FamilySettings()


def test_the_options_of_an_older_run_reach_its_family_on_resume(monkeypatch: pytest.MonkeyPatch) -> None:
    """`load_run_family`, which --resume, shards and rescoring call, gives an older run's family its options."""
    monkeypatch.setattr(FAMILIES, "entries", dict(FAMILIES.known()))  # the example family is registered here only
    example = importlib.import_module("tests.example_family")
    FAMILIES.add("recall", example.ENTRY)
    config = RunConfig.model_validate(_config(family_options={"recall": {"answer_tokens": 2}}))
    older = load_run_family("recall", config)
    fresh = load_run_family("recall", RunConfig.model_validate(_config()))
    assert isinstance(older, example.RecallFamily) and isinstance(fresh, example.RecallFamily)
    assert older.options.answer_tokens == 2 and fresh.options.answer_tokens == example.RecallOptions().answer_tokens
