"""Every registered family runs end to end on the mock model: load, play, judge, store, report, render, page.

A new family is covered by being registered: nothing here names one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from appliance.catalog.models import load_catalog
from appliance.catalog.panels import get_panel
from appliance.run.rescoring import rescore_run
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import build_scenario_report, family_entry, family_names, load_family
from appliance.scenarios.base import JudgedFamily
from appliance.store import Store
from appliance.view import collect_contents, render_page
from tests.fakes import scripted_factory, seed_echo, shortest_match

REPO = Path(__file__).resolve().parent.parent
PLAYERS = ["smollm2-135m", "gemma3-270m"]


@pytest.mark.parametrize("name", family_names())
def test_every_registered_family_plays_stores_reports_and_renders(name: str, tmp_path: Path) -> None:
    entry = family_entry(name)
    catalog = load_catalog(REPO / "models.toml")
    config = RunConfig(
        scenarios=[name],
        players=PLAYERS,
        interrogator=PLAYERS[0],
        simulator=PLAYERS[0],
        panel=get_panel(REPO / "judges" / "panels.toml", "default"),
        limit=entry.quick_limit,
        models_file=str(catalog.source),
    )
    factory = scripted_factory()
    with Store.open(tmp_path / "db.duckdb") as store:
        family = load_family(name, seed=0, store=store)
        summary = Runner(catalog, store, factory).execute(config, [family])
        assert summary.episodes_total > 0
        assert summary.episodes_finished > 0, f"{name}: no episode finished on the mock model"
        assert store.finished_episode_ids(summary.run_id), "finished episodes are stored"
        report = build_scenario_report(store, summary.run_id, name)
        console = Console(record=True, width=240)
        report.render(console)
        shown = console.export_text()
        assert summary.run_id in shown
        assert any(player in shown for player in PLAYERS), f"{name}: the report names no player"
        assert report.model_dump()["run_id"] == summary.run_id
        page = collect_contents(store, [summary.run_id], REPO / "judges", max_transcripts=50)
        (board,) = page.boards
        assert board.metrics and all(metric.rows for metric in board.metrics), f"{name}: the page has no leaderboard"
        assert page.transcripts and page.transcripts_total == summary.episodes_total
        assert "<html" in render_page(page, name)
        judged = any(isinstance(stage, JudgedFamily) and stage.judge_template for stage in family.stages())
        if judged:  # a judged family can be judged again with another panel from the stored transcripts
            again = rescore_run(store, catalog, summary.run_id, config.panel, backend_factory=factory)
            assert again.episodes > 0
    used_judges = {model for model, backend in factory.opened.items() if backend.requests and model in PLAYERS}
    assert used_judges, "the mock models were asked"


def test_the_mock_model_answers_every_grammar_the_appliance_writes() -> None:
    grammar = "\n".join(
        [
            'root ::= "{\\"strategy\\": \\"" strategy "\\", \\"request\\": \\"" char{1,40} "\\"}"',
            'strategy ::= "flaw" | "related"',
            'char ::= [^"\\\\\\x00-\\x1f] | "\\\\" ["\\\\/nt]',
        ]
    )
    assert shortest_match(grammar) == '{"strategy": "flaw", "request": "y"}'
    assert shortest_match('root ::= "{\\"score\\": " value "}"\nvalue ::= [1-9] | "10"') == '{"score": 1}'


def _transcripts(db: Path, name: str, seed: int) -> list[tuple[str, str, str]]:
    catalog = load_catalog(REPO / "models.toml")
    config = RunConfig(
        scenarios=[name],
        players=PLAYERS,
        interrogator=PLAYERS[0],
        simulator=PLAYERS[0],
        panel=get_panel(REPO / "judges" / "panels.toml", "default"),
        seed=seed,
        limit=family_entry(name).quick_limit,
        models_file=str(catalog.source),
    )
    with Store.open(db) as store:
        summary = Runner(catalog, store, scripted_factory(seed_echo)).execute(
            config, [load_family(name, seed=seed, store=store)]
        )
        rows = store.query(
            "SELECT e.instance_id || ':' || e.player, m.speaker, m.text FROM messages m "
            "JOIN episodes e USING (episode_id) WHERE e.run_id = ? ORDER BY e.instance_id, e.player, m.idx",
            [summary.run_id],
        )
    return [(str(a), str(b), str(c)) for a, b, c in rows]


@pytest.mark.parametrize("name", family_names())
def test_every_family_samples_from_seeds_that_do_not_depend_on_the_run(name: str, tmp_path: Path) -> None:
    first = _transcripts(tmp_path / "first.duckdb", name, seed=11)
    assert any("(seed " in text for _, _, text in first), f"{name}: no free-text request was sampled"
    assert _transcripts(tmp_path / "again.duckdb", name, seed=11) == first
    assert _transcripts(tmp_path / "other.duckdb", name, seed=12) != first
