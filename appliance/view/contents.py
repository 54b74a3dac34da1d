"""What `appliance view` shows, read from the store: leaderboards, breakdowns, calibrations,
a comparison and the transcripts, as plain data the page embeds.

Every figure is computed here from the same headline metrics `compare` uses, so the page, the
terminal report and the regression gate cannot disagree about a number.
"""

from __future__ import annotations

import io
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import fmean
from typing import Any

from rich.console import Console

from appliance.compare.gate import Thresholds, compare_runs, player_pairs, shared_headlines
from appliance.compare.sweep import SweepResult, run_sweep_results
from appliance.errors import ApplianceError
from appliance.headline import Estimate, Headline, Unit, estimate
from appliance.scenario_spec import family_of
from appliance.scenarios.registry import build_scenario_report, family_entry, scenario_evidence
from appliance.store import Store
from appliance.store.export import TABLES
from appliance.store.labels import calibration_rows
from appliance.store.run_view import RunView
from appliance.util.stats import bootstrap_interval
from appliance.view.criteria import LabelCriterion, criteria_of_templates

RESAMPLES = 1000


@dataclass(frozen=True)
class MetricBoard:
    metric: str
    description: str
    higher_is_better: bool
    #: one row per player
    rows: list[Estimate]
    #: per group (clembench's games, PingPong's languages), one estimate per player: {group: [Estimate]}
    groups: dict[str, list[Estimate]] = field(default_factory=dict)
    #: a judged figure's calibration, and the line saying the panel did not separate the players where
    #: it did not (`appliance.judging.evidence`); empty for a figure the rules compute
    evidence: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ScenarioBoard:
    run_id: str
    scenario: str
    metrics: list[MetricBoard]
    #: the mean of every stored per-episode score (criteria, sub-scores) per player
    scores: dict[str, list[Estimate]]
    #: the family's own report as the terminal prints it
    report_text: str


@dataclass(frozen=True)
class InstanceDelta:
    key: str
    base: float | None
    candidate: float | None
    delta: float | None


@dataclass(frozen=True)
class MetricDeltas:
    family: str
    metric: str
    base_player: str
    candidate_player: str
    higher_is_better: bool
    deltas: list[InstanceDelta]


@dataclass(frozen=True)
class ComparisonView:
    base_run: str
    candidate_run: str
    #: `compare`'s table, forced (the page shows what differs instead of refusing)
    summary: dict[str, Any]
    per_instance: list[MetricDeltas]


@dataclass(frozen=True)
class Verdict:
    judge: str
    criterion: str
    score: float | None
    parsed: bool
    template: str
    raw_text: str


@dataclass(frozen=True)
class TranscriptMessage:
    idx: int
    speaker: str
    model: str
    text: str
    finish_reason: str
    verdicts: list[Verdict]


@dataclass(frozen=True)
class Transcript:
    episode_id: str
    run_id: str
    scenario: str
    instance_id: str
    player: str
    status: str
    messages: list[TranscriptMessage]
    #: verdicts on the whole episode or on a target that is not one of its messages
    episode_verdicts: list[Verdict]
    scores: dict[str, float | None]
    criteria: list[LabelCriterion]


@dataclass(frozen=True)
class ViewContents:
    runs: list[dict[str, Any]]
    boards: list[ScenarioBoard]
    calibrations: list[dict[str, Any]]
    comparison: ComparisonView | None
    #: why there is no comparison although two runs were given
    comparison_note: str
    transcripts: list[Transcript]
    #: transcripts stored for these runs, of which `transcripts` holds at most max_transcripts
    transcripts_total: int
    #: every sweep of these runs against its base in the same run (the report's sweep tables)
    sweeps: list[SweepResult] = field(default_factory=list)
    #: why a sweep of these runs has no curve (its base did not play beside it)
    sweep_notes: list[str] = field(default_factory=list)


def collect_contents(
    store: Store, run_ids: Sequence[str], judges_dir: Path, *, max_transcripts: int, seed: int = 0
) -> ViewContents:
    for run_id in run_ids:
        if not store.has_run(run_id):
            raise ApplianceError(f"{store.path}: no run '{run_id}'")
    runs = [_run_summary(store, run_id) for run_id in run_ids]
    boards = [
        _scenario_board(store, run_id, scenario, seed) for run_id in run_ids for scenario in store.run(run_id).scenarios
    ]
    comparison, note = None, ""
    if len(run_ids) == 2:
        try:
            comparison = _comparison(store, run_ids[0], run_ids[1], seed)
        except ApplianceError as error:
            note = str(error)
    transcripts, total = _transcripts(store, run_ids, judges_dir, max_transcripts)
    sweeps: list[SweepResult] = []
    sweep_notes: list[str] = []
    for run_id in run_ids:
        found, notes = run_sweep_results(store, run_id, seed=seed)
        sweeps += found
        sweep_notes += notes
    return ViewContents(
        runs=runs,
        boards=boards,
        calibrations=_calibrations(store, runs),
        comparison=comparison,
        comparison_note=note,
        transcripts=transcripts,
        transcripts_total=total,
        sweeps=sweeps,
        sweep_notes=sweep_notes,
    )


def _run_summary(store: Store, run_id: str) -> dict[str, Any]:
    run = store.run(run_id)
    config = run.config
    return {
        "run_id": run_id,
        "started_at": str(run.started_at),
        "status": run.status,
        "seed": run.seed,
        "scenarios": run.scenarios,
        "players": store.episode_players(run_id),
        "panel": config.get("panel", {}).get("name", ""),
        "judges": config.get("panel", {}).get("judges", []),
        "calibrations": config.get("calibrations", {}),
        "episodes": store.episode_statuses(run_id),
    }


def _scenario_board(store: Store, run_id: str, scenario: str, seed: int) -> ScenarioBoard:
    entry = family_entry(family_of(scenario))
    metrics: list[MetricBoard] = []
    if entry.headline is not None:
        evidence = {e.figure: e.lines() for e in scenario_evidence(store, run_id, scenario)}
        boards = _metric_boards(entry.headline(RunView(store, run_id, scenario), None), seed)
        metrics = [replace(b, evidence=evidence.get(f"{entry.name}.{b.metric}", [])) for b in boards]
    return ScenarioBoard(
        run_id=run_id,
        scenario=scenario,
        metrics=metrics,
        scores=_stored_scores(store, run_id, scenario, seed),
        report_text=_report_text(store, run_id, scenario),
    )


def _metric_boards(headline: Headline, seed: int) -> list[MetricBoard]:
    by_player: dict[str, list[Unit]] = defaultdict(list)
    for unit in headline.units:
        by_player[unit.player].append(unit)
    groups = sorted({unit.group for unit in headline.units if unit.group})
    boards = []
    for metric in headline.metrics:
        rows = [estimate(player, units, metric.statistic, seed) for player, units in sorted(by_player.items())]
        per_group: dict[str, list[Estimate]] = {}
        if len(groups) > 1:
            for group in groups:
                per_group[group] = [
                    estimate(player, [u for u in units if u.group == group], metric.statistic, seed)
                    for player, units in sorted(by_player.items())
                ]
        boards.append(MetricBoard(metric.name, metric.description, metric.higher_is_better, rows, per_group))
    return boards


def _stored_scores(store: Store, run_id: str, scenario: str, seed: int) -> dict[str, list[Estimate]]:
    """Per metric, per scored model: the mean over finished episodes (calibrated where calibrated)."""
    rows = store.finished_score_values(run_id, scenario)
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for metric, player, value in rows:
        values[str(metric)][str(player)].append(float(value))
    boards: dict[str, list[Estimate]] = {}
    for metric, players in values.items():
        boards[metric] = [
            Estimate(player, fmean(found), bootstrap_interval(found, seed=seed, resamples=RESAMPLES), len(found))
            for player, found in players.items()
        ]
    return boards


def _report_text(store: Store, run_id: str, scenario: str) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=140, record=True, color_system=None)
    try:
        build_scenario_report(store, run_id, scenario).render(console)
    except ApplianceError as error:
        return f"(no report: {error})"
    return console.export_text()


def _comparison(store: Store, base: str, candidate: str, seed: int) -> ComparisonView:
    headlines = shared_headlines(store, base, candidate)
    comparison = compare_runs(
        store, base, candidate, Thresholds(), force=True, resamples=RESAMPLES, seed=seed, headlines=headlines
    )
    per_instance: list[MetricDeltas] = []
    for scenario, base_headline, candidate_headline in headlines:
        for base_player, candidate_player in player_pairs(scenario, base_headline, candidate_headline, None):
            per_instance += _instance_deltas(scenario, base_headline, candidate_headline, base_player, candidate_player)
    return ComparisonView(base, candidate, comparison.model_dump(), per_instance)


def _instance_deltas(
    scenario: str, base: Headline, candidate: Headline, base_player: str, candidate_player: str
) -> list[MetricDeltas]:
    base_units = {u.key: u for u in base.units if u.player == base_player}
    candidate_units = {u.key: u for u in candidate.units if u.player == candidate_player}
    keys = sorted(set(base_units) & set(candidate_units))
    found = []
    for metric in base.metrics:
        deltas = []
        for key in keys:
            b, c = metric.statistic([base_units[key]]), metric.statistic([candidate_units[key]])
            deltas.append(InstanceDelta(key, b, c, None if b is None or c is None else c - b))
        found.append(
            MetricDeltas(
                family_of(scenario), metric.name, base_player, candidate_player, metric.higher_is_better, deltas
            )
        )
    return found


def _calibrations(store: Store, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every calibration in the store, marked with the runs whose scores it maps."""
    used: dict[str, list[str]] = defaultdict(list)
    for run in runs:
        for calibration_id in run["calibrations"].values():
            used[str(calibration_id)].append(run["run_id"])
    rows = calibration_rows(store)
    return [
        {
            "calibration_id": calibration_id,
            "created_at": str(created_at),
            "panel": panel,
            "label_set": label_set,
            "criterion": criterion,
            "template": template,
            "model": json.loads(model),
            "metrics": json.loads(metrics),
            "used_by": used.get(calibration_id, []),
        }
        for calibration_id, created_at, panel, label_set, criterion, template, model, metrics in rows
    ]


def _transcripts(store: Store, run_ids: Sequence[str], judges_dir: Path, limit: int) -> tuple[list[Transcript], int]:
    """The first `limit` episodes in run and episode order, with messages, verdicts and scores.

    Rows are read with the export's own SELECTs, so the page shows the columns a lab's scripts read.
    """
    episodes: list[dict[str, Any]] = []
    for run_id in run_ids:
        episodes += store.query_records(TABLES["episodes"], [run_id])
    chosen = episodes[:limit]
    wanted = {str(row["episode_id"]) for row in chosen}
    rows, scores = _episode_rows(store, run_ids, wanted)
    criteria_cache: dict[tuple[str, ...], list[LabelCriterion]] = {}
    transcripts = []
    for episode in chosen:
        episode_id = str(episode["episode_id"])
        judgments = rows["judgments"].get(episode_id, [])
        by_target = _verdicts_by_message(judgments)
        own_messages = rows["messages"].get(episode_id, [])
        indices = {int(row["message_idx"]) for row in own_messages}
        templates = tuple(sorted({str(row["template"]) for row in judgments if row["template"]}))
        if templates not in criteria_cache:
            judged = {str(row["criterion"]) for row in judgments}
            criteria_cache[templates] = criteria_of_templates(templates, judged, judges_dir)
        transcripts.append(
            Transcript(
                episode_id=episode_id,
                run_id=str(episode["run_id"]),
                scenario=str(episode["scenario"]),
                instance_id=str(episode["instance_id"]),
                player=str(episode["player"]),
                status=str(episode["status"]),
                messages=[
                    TranscriptMessage(
                        idx=int(row["message_idx"]),
                        speaker=str(row["speaker"]),
                        model=str(row["model"]),
                        text=str(row["text"]),
                        finish_reason=str(row["finish_reason"]),
                        verdicts=by_target.get(int(row["message_idx"]), []),
                    )
                    for row in own_messages
                ],
                episode_verdicts=[v for t, found in sorted(by_target.items()) if t not in indices for v in found],
                scores=scores.get(episode_id, {}),
                criteria=criteria_cache[templates],
            )
        )
    return transcripts, len(episodes)


def _episode_rows(
    store: Store, run_ids: Sequence[str], wanted: set[str]
) -> tuple[dict[str, dict[str, list[dict[str, Any]]]], dict[str, dict[str, float | None]]]:
    """The wanted episodes' messages and judgments (by table, then episode) and their scores by metric."""
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {name: defaultdict(list) for name in ("messages", "judgments")}
    scores: dict[str, dict[str, float | None]] = defaultdict(dict)
    for run_id in run_ids:
        for table in ("messages", "judgments"):
            for row in store.query_records(TABLES[table], [run_id]):
                if row["episode_id"] in wanted:
                    rows[table][row["episode_id"]].append(row)
        for row in store.query_records(TABLES["scores"], [run_id]):
            if row["episode_id"] in wanted:
                value = row["calibrated_value"] if row["calibrated_value"] is not None else row["value"]
                seat = "" if row["scored_model"] == row["player"] else f" ({row['scored_model']})"
                scores[row["episode_id"]][f"{row['metric']}{seat}"] = value
    return rows, scores


def _verdicts_by_message(judgments: list[dict[str, Any]]) -> dict[int, list[Verdict]]:
    by_target: dict[int, list[Verdict]] = defaultdict(list)
    for row in judgments:
        by_target[int(row["message_idx"])].append(
            Verdict(
                judge=str(row["judge"]),
                criterion=str(row["criterion"]),
                score=row["score"],
                parsed=bool(row["parsed"]),
                template=str(row["template"] or ""),
                raw_text=str(row["raw_text"]),
            )
        )
    return by_target
