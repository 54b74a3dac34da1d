"""Every judged figure of the five families states its calibration and says when the panel was blind.

Each judged family plays two scripted runs with the same two players. In the first, one player is built
to be better: its replies carry a mark, and the scripted judges rate what carries the mark higher (and,
in pairwise verdicts, prefer it). In the second the players are identical. The report's evidence must
say, for every judged figure, which calibration mapped it or that it is uncalibrated; and it must warn,
in one line, exactly where the panel did not separate the players: on every figure of the identical
run, on none of the better-built run's. clembench and SimulateBench are scored by rules: no figure of
theirs is judged.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path

import duckdb
import pytest

from appliance.catalog.models import load_catalog
from appliance.catalog.panels import Panel, get_panel
from appliance.engine.scripted import scripted_scores
from appliance.engine.types import GenerationRequest, TokenScores
from appliance.headline import HeadlineMetric, Unit, mean_of
from appliance.judging.evidence import FigureEvidence, separation
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import build_scenario_report, load_family
from appliance.store import Store
from tests.fakes import REPO, Reply, role_of, scripted_factory, shortest_match
from tests.test_cli import cli

PLAYERS = ["smollm2-135m", "gemma3-270m"]
MARK = "[MARKED-BEST]"
#: a marked and a plain reply of the same length, so PingPong's length factor treats them alike
MARKED, PLAIN = f"A reply {MARK}.", "A reply [plain-words-x]."
SUPPORT_ROLES = ("interrogator", "user_agent", "simulator")


def _judged_reply(model: str, request: GenerationRequest) -> str:
    """A judge's verdict that rates text carrying the mark 4 (1-5) or 8 (1-10) and the rest 2 or 3."""
    assert request.grammar is not None
    text = "\n".join(m.content for m in request.messages)
    verdict = json.loads(shortest_match(request.grammar))
    if "turns" in verdict:  # PingPong: a verdict per player turn; the second judge flags unmarked turns as refusals
        replies = re.findall(r"^\[\d+\] [^:]+: (.*)$", text, flags=re.MULTILINE)
        turns = [
            {
                "in_character": 4 if MARK in reply else 2,
                "entertaining": 4 if MARK in reply else 2,
                "fluent": 4 if MARK in reply else 2,
                "refusal": model == "gemma3-270m" and MARK not in reply,
            }
            for reply in replies
        ]
        return json.dumps(verdict | {"turns": turns})
    if "better" in verdict:  # SimulBench's pairwise verdict
        first, _, second = (
            text.rpartition("Reply B:")[0].rpartition("Reply A:")[2],
            None,
            text.rpartition("Reply B:")[2],
        )
        choice = "A" if MARK in first and MARK not in second else "B" if MARK in second and MARK not in first else "tie"
        return json.dumps(verdict | {"better": choice})
    if "score" in verdict:  # a 1-10 rating of the last reply
        return json.dumps(verdict | {"score": 8 if MARK in text.rpartition("Reply")[2] or MARK in text[-400:] else 3})
    if all(isinstance(v, dict) and "score" in v for v in verdict.values()):  # DeepEval: every role rated
        exchange = text.rpartition("The exchange:")[2]
        blocks = {block.split(":", 1)[0].strip(): block for block in exchange.split("\n\n") if ":" in block}
        return json.dumps(
            {role: v | {"score": 8 if MARK in blocks.get(role, "") else 3} for role, v in verdict.items()}
        )
    return json.dumps(verdict)


#: the default panel's follow-ups that welcome a reply (judges/turn_followups_8.toml)
WELCOMING = {
    line.strip() for line in tomllib.loads((REPO / "judges" / "turn_followups_8.toml").read_text())["positive"]
}


def marked_scores(request: GenerationRequest) -> TokenScores:
    """Likelihood judges: after a reply that carries the mark, the welcoming follow-ups are far likelier
    and the others far less likely (the scripted scores shifted), so a likelihood panel's features, and
    the calibration's map of them, follow the mark."""
    scores = scripted_scores(request)
    assert request.scoring is not None
    prompt = request.prompt or "".join(message.content for message in request.messages)
    welcoming = request.scoring.continuation.strip() in WELCOMING
    shift = (3.0 if welcoming else -3.0) if MARK in prompt else 0.0
    return TokenScores(
        token_logprobs=tuple(v + shift for v in scores.token_logprobs),
        choice_logprobs=tuple(v + shift for v in scores.choice_logprobs),
    )


def marked_players(better: str | None) -> Reply:
    """Players reply `MARKED` (the `better` model) or `PLAIN`; judges rate by the mark (see `_judged_reply`)."""

    def reply(model: str, request: GenerationRequest) -> str:
        role = role_of(request)
        if role.startswith("judge"):
            return _judged_reply(model, request)
        if request.grammar is not None:
            return shortest_match(request.grammar)
        if role in SUPPORT_ROLES:
            return "Tell me more about it."
        return MARKED if model == better else PLAIN

    return reply


def _run(
    db: Path, family: str, panel: Panel, better: str | None, limit: int, players: list[str] = PLAYERS
) -> list[FigureEvidence]:
    catalog = load_catalog(REPO / "models.toml")
    config = RunConfig(
        scenarios=[family],
        players=players,
        interrogator=PLAYERS[0],
        simulator=PLAYERS[0],
        panel=panel,
        seed=5,
        limit=limit,
        models_file=str(catalog.source),
    )
    with Store.open(db) as store:
        summary = Runner(catalog, store, scripted_factory(marked_players(better), marked_scores)).execute(
            config, [load_family(family, seed=5, store=store)]
        )
        assert summary.episodes_failed == 0, summary
        return build_scenario_report(store, summary.run_id, family).evidence


SAMPLED = Panel(name="sampled-pair", judges=PLAYERS)
#: DeepEval plays each ordered pair three times while payoffs are stable: a third player gives each
#: role enough games for the shuffles to tell a real spread from noise
THREE = [*PLAYERS, "qwen2.5-coder-0.5b"]
#: family, panel, limit, players, the judged figures expected
JUDGED = {
    "pingpong (sampled)": ("pingpong", SAMPLED, 6, PLAYERS, {"final", "ln_score", "refusal_ratio"}),
    "pingpong (likelihood, calibrated)": ("pingpong", None, 6, PLAYERS, {"final", "ln_score", "calibrated"}),
    "simulbench": ("simulbench", SAMPLED, 6, PLAYERS, {"rating", "rating_hard", "pairwise"}),
    "deepeval": (
        "deepeval",
        SAMPLED,
        6,
        THREE,
        {"code_review.programmer", "code_review.reviewer", "translation.translator", "translation.proofreader"},
    ),
}


@pytest.mark.parametrize("name", sorted(JUDGED))
def test_every_judged_figure_names_its_calibration_and_warns_only_where_the_panel_is_blind(
    name: str, tmp_path: Path
) -> None:
    family, panel, limit, players, expected = JUDGED[name]
    chosen = panel or get_panel(REPO / "judges" / "panels.toml", "default")
    better = _run(tmp_path / "better.duckdb", family, chosen, players[0], limit, players)
    identical = _run(tmp_path / "identical.duckdb", family, chosen, None, limit, players)
    for evidence in (better, identical):
        figures = {e.figure.split(".", 1)[1] for e in evidence}
        assert expected <= figures, figures
        for e in evidence:
            calibrated = e.calibration.startswith("calibrated on ")
            assert calibrated or e.calibration.startswith("uncalibrated"), e.calibration
            assert calibrated == bool(e.calibration_ids), e
            if panel is None and e.judged_by == "final":  # the default panel ships calibrated on FED
                assert calibrated and "fed-turn / Overall" in e.calibration, e.calibration
    warned = {e.figure: e.separation.blind_line(e.figure) for e in better if e.separation.separated is not None}
    assert set(warned) >= {f"{family}.{f}" for f in expected if f != "refusal_ratio" or panel is not None}, warned
    assert all(line is None for line in warned.values()), warned
    blind = {e.figure: e.separation for e in identical}
    for figure in expected:
        separation = blind[f"{family}.{figure}"]
        assert separation.separated is False, (figure, separation)
        line = separation.blind_line(f"{family}.{figure}")
        assert line is not None and "did not separate these players" in line and "does not rank them" in line


@pytest.mark.parametrize("family", ["clembench", "simulatebench"])
def test_families_scored_by_rules_have_no_judged_figure(family: str, tmp_path: Path) -> None:
    assert _run(tmp_path / "rules.duckdb", family, SAMPLED, None, 2) == []


def test_the_cli_report_json_and_export_carry_the_evidence(tmp_path: Path) -> None:
    """The terminal report prints the blind line, `--json` and the export carry the same evidence."""
    db = tmp_path / "blind.duckdb"
    _run(db, "simulbench", SAMPLED, None, 6)
    shown = cli("report", "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    assert "simulbench.rating: the panel did not separate these players (spread 0" in shown.stdout
    assert "simulbench.pairwise (pairwise points: win 1, tie 0.5, lose 0): uncalibrated" in shown.stdout
    as_json = cli("report", "--json", "--db", str(db))
    figures = {f["figure"]: f for f in json.loads(as_json.stdout)[0]["judged_figures"]}
    assert figures["simulbench.rating"]["separation"]["separated"] is False
    assert figures["simulbench.pairwise"]["separation"]["ties"] == 1.0
    exported = cli("export", "--format", "jsonl", "--out", str(tmp_path / "export"), "--db", str(db))
    assert exported.returncode == 0, exported.stderr
    written = json.loads((tmp_path / "export" / "judged_figures.json").read_text())
    assert {f["figure"] for f in written} == set(figures)
    # the page shows each figure's evidence under its own leaderboard table (its data, inlined)
    page = tmp_path / "page.html"
    assert cli("view", "--out", str(page), "--db", str(db)).returncode == 0
    assert '"evidence": ["simulbench.rating (1-10, compared scripts): uncalibrated' in page.read_text()
    # a run that has not reached its comparisons yet (running, or interrupted) claims no calibration for them
    with duckdb.connect(str(db)) as connection:
        connection.execute("DELETE FROM scores WHERE metric = 'pair_outcome'")
    partial = cli("report", "--db", str(db))
    assert partial.returncode == 0, partial.stderr
    assert "simulbench.pairwise (pairwise points: win 1, tie 0.5, lose 0): not judged yet" in partial.stdout
    assert "simulbench.rating (1-10, compared scripts): uncalibrated" in partial.stdout


def test_compare_says_where_the_panel_did_not_separate_base_from_candidate(tmp_path: Path) -> None:
    """Base: identical players. Candidate: SmolLM2 built better. The panel separates SmolLM2's two runs
    and not Gemma's, and `compare` says so for Gemma's pair only, on each judged metric."""
    db = tmp_path / "two.duckdb"
    _run(db, "simulbench", SAMPLED, None, 6)
    _run(db, "simulbench", SAMPLED, PLAYERS[0], 6)
    with Store.open(db, read_only=True) as store:
        base, candidate = (str(r) for (r,) in store.query("SELECT run_id FROM runs ORDER BY started_at"))
    compared = cli("compare", base, candidate, "--json", "--db", str(db))
    assert compared.returncode in (0, 1), compared.stderr
    blind = json.loads(compared.stdout)["blind"]
    assert sorted(line.split(":")[0] for line in blind) == [
        "simulbench.rating (gemma3-270m)",
        "simulbench.rating_hard (gemma3-270m)",
    ], blind
    assert all("did not separate the base run from the candidate" in line for line in blind)


def _units(rows: list[tuple[str, str, float]]) -> list[Unit]:
    return [Unit(key=key, player=player, values={"v": value}) for key, player, value in rows]


METRIC = HeadlineMetric("v", mean_of("v"), judged_by="v")


def test_separation_on_hand_made_units() -> None:
    """Paired items: a constant edge of one point separates even where items differ wildly; identical
    values, or three units a player, claim nothing of the kind; NaN values are left out."""
    hard_and_easy = [(f"i{n}", p, 10.0 * n + (1.0 if p == "a" else 0.0)) for n in range(8) for p in ("a", "b")]
    paired = separation(_units(hard_and_easy), METRIC)
    assert paired.shuffled == "within items" and paired.separated is True and paired.ties == 0.0
    same = separation(_units([(f"i{n}", p, 3.0) for n in range(8) for p in ("a", "b")]), METRIC)
    assert same.separated is False and same.ties == 1.0 and same.p_value == 1.0
    few = separation(_units([(f"i{n}", p, 9.0 if p == "a" else 1.0) for n in range(3) for p in ("a", "b")]), METRIC)
    assert few.separated is None and few.units == 6  # 2 of 8 paired arrangements reach the edge: 25%
    unpaired = [(f"{p}{n}", p, 9.0 if p == "a" else 1.0) for n in range(6) for p in ("a", "b")]
    assert separation(_units(unpaired), METRIC).shuffled == "across all units"
    with_nan = separation(_units([*hard_and_easy, ("i9", "a", math.nan)]), METRIC)
    assert with_nan.units == 16 and with_nan.separated is True


def test_ties_count_items_two_players_share() -> None:
    """One player's repeats of an item are not a tie between players."""
    repeats = separation(_units([("i1", "a", 2.0), ("i1", "a", 2.0), ("i2", "a", 1.0), ("i2", "a", 1.0)]), METRIC)
    assert repeats.ties is None and repeats.separated is None
