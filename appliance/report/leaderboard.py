"""The PingPong leaderboard of a stored run.

Per model: mean of each criterion, the final score (mean of the criteria,
averaged over conversations) with a bootstrap 95% interval over
conversations, the share of conversations with a refusal, the median length
of the player's messages, and the length-normalised score.

Length normalisation: judges favour long replies. A model whose median reply
(in characters) is longer than the median over all players' replies in the
run has its final score multiplied by sqrt(global median / model median);
shorter-than-median models are not changed.
"""

from __future__ import annotations

import math
from statistics import mean, median

from pydantic import BaseModel

from appliance.errors import ApplianceError
from appliance.report.bootstrap import bootstrap_interval
from appliance.store import Store
from appliance.store.labels import get_calibration

CRITERIA = ("in_character", "entertaining", "fluent")


class LeaderboardRow(BaseModel):
    model: str
    episodes: int
    failed_episodes: int
    judged_episodes: int
    in_character: float | None
    entertaining: float | None
    fluent: float | None
    final: float | None
    final_ci: tuple[float, float] | None
    refusal_ratio: float | None
    median_length: float | None
    length_factor: float
    ln_score: float | None
    ln_score_ci: tuple[float, float] | None
    unparsed_verdicts: int
    #: the final score mapped to the human scale of the calibration (see Leaderboard.calibration)
    calibrated_final: float | None = None
    calibrated_final_ci: tuple[float, float] | None = None


class Leaderboard(BaseModel):
    run_id: str
    scenario: str
    panel: str
    status: str
    global_median_length: float | None
    rows: list[LeaderboardRow]
    #: the calibration applied to this panel's verdicts: id, label set, criterion, human scale
    calibration: dict[str, object] | None = None
    #: every panel whose scores this run holds
    panels: list[str] = []


def length_factor(model_median: float | None, global_median: float | None) -> float:
    if not model_median or not global_median or model_median <= global_median:
        return 1.0
    return math.sqrt(global_median / model_median)


def build_leaderboard(
    store: Store, run_id: str | None = None, scenario: str = "pingpong", panel: str | None = None
) -> Leaderboard:
    run_id = run_id or store.latest_run_id()
    if run_id is None:
        raise ApplianceError(f"{store.path}: no runs stored yet (run 'appliance run' first)")
    run = store.run(run_id)
    panels = [
        str(row[0]) for row in store.query("SELECT DISTINCT panel FROM scores WHERE run_id = ? ORDER BY 1", [run_id])
    ]
    panel = panel or str(run["config"]["panel"]["name"])
    if panels and panel not in panels:
        raise ApplianceError(f"--panel: run '{run_id}' has no scores of panel '{panel}' (scored: {', '.join(panels)})")
    episodes = store.query(
        "SELECT episode_id, player, status FROM episodes WHERE run_id = ? AND scenario = ?", [run_id, scenario]
    )
    if not episodes:
        raise ApplianceError(f"{store.path}: run '{run_id}' has no {scenario} episodes")
    lengths = store.query(
        "SELECT e.player, length(m.text) FROM messages m JOIN episodes e USING (episode_id) "
        "WHERE e.run_id = ? AND e.scenario = ? AND m.speaker = 'player'",
        [run_id, scenario],
    )
    scores = store.query(
        "SELECT s.episode_id, s.player, s.metric, s.value, s.calibrated_value, s.calibration_id "
        "FROM scores s JOIN episodes e USING (episode_id) "
        "WHERE e.run_id = ? AND e.scenario = ? AND s.panel = ? AND e.status = 'finished'",
        [run_id, scenario, panel],
    )
    all_lengths = [float(length) for _, length in lengths]
    global_median = median(all_lengths) if all_lengths else None
    players = sorted({str(player) for _, player, _ in episodes})
    rows = [_row(player, episodes, lengths, scores, global_median, seed=index) for index, player in enumerate(players)]
    rows.sort(key=lambda row: -1.0 if row.ln_score is None else row.ln_score, reverse=True)
    calibration_ids = sorted({str(row[5]) for row in scores if row[5] is not None})
    return Leaderboard(
        run_id=run_id,
        scenario=scenario,
        panel=panel,
        status=str(run["status"]),
        global_median_length=global_median,
        rows=rows,
        calibration=_describe_calibration(store, calibration_ids),
        panels=panels,
    )


def _describe_calibration(store: Store, ids: list[str]) -> dict[str, object] | None:
    if not ids:
        return None
    record = get_calibration(store, ids[-1])
    return {
        "calibration_id": record.calibration_id if len(ids) == 1 else ", ".join(ids),
        "label_set": record.label_set,
        "criterion": record.criterion,
        "template": record.template,
        "human_scale": record.model.get("human_scale"),
    }


def _row(
    player: str,
    episodes: list[tuple[object, ...]],
    lengths: list[tuple[object, ...]],
    scores: list[tuple[object, ...]],
    global_median: float | None,
    seed: int,
) -> LeaderboardRow:
    own_episodes = [e for e in episodes if e[1] == player]
    per_episode: dict[str, dict[str, float | None]] = {}
    calibrated: list[float] = []
    for episode_id, score_player, metric, value, calibrated_value, _ in scores:
        if score_player == player:
            per_episode.setdefault(str(episode_id), {})[str(metric)] = None if value is None else float(value)  # type: ignore[arg-type]
            if metric == "final" and calibrated_value is not None:
                calibrated.append(float(calibrated_value))  # type: ignore[arg-type]

    def metric_values(metric: str) -> list[float]:
        return [v for metrics in per_episode.values() if (v := metrics.get(metric)) is not None]

    finals = metric_values("final")
    own_lengths = [float(length) for length_player, length in lengths if length_player == player]  # type: ignore[arg-type]
    model_median = median(own_lengths) if own_lengths else None
    factor = length_factor(model_median, global_median)
    refusals = metric_values("refusal")
    criterion_means = {c: (mean(values) if (values := metric_values(c)) else None) for c in CRITERIA}
    final = mean(finals) if finals else None
    final_ci = bootstrap_interval(finals, seed=seed)
    return LeaderboardRow(
        model=player,
        episodes=len(own_episodes),
        failed_episodes=sum(1 for e in own_episodes if e[2] != "finished"),
        judged_episodes=len(finals),
        in_character=criterion_means["in_character"],
        entertaining=criterion_means["entertaining"],
        fluent=criterion_means["fluent"],
        final=final,
        final_ci=final_ci,
        refusal_ratio=mean(refusals) if refusals else None,
        median_length=model_median,
        length_factor=factor,
        ln_score=None if final is None else final * factor,
        ln_score_ci=None if final_ci is None else (final_ci[0] * factor, final_ci[1] * factor),
        unparsed_verdicts=int(sum(metric_values("unparsed_verdicts"))),
        calibrated_final=mean(calibrated) if calibrated else None,
        calibrated_final_ci=bootstrap_interval(calibrated, seed=seed),
    )
