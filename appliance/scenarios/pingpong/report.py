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
from appliance.scenarios.pingpong.family import CRITERIA
from appliance.stats import bootstrap_interval
from appliance.store import Store
from appliance.store.labels import get_calibration
from appliance.store.run_view import RunView, StoredEpisode, StoredScore


class PingPongRow(BaseModel):
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
    #: the final score mapped to the human scale of the calibration (see PingPongLeaderboard.calibration)
    calibrated_final: float | None = None
    calibrated_final_ci: tuple[float, float] | None = None


class PingPongLeaderboard(BaseModel):
    run_id: str
    scenario: str
    panel: str
    status: str
    global_median_length: float | None
    rows: list[PingPongRow]
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
) -> PingPongLeaderboard:
    run_id = store.resolve_run_id(run_id)
    run = RunView(store, run_id, scenario)
    panels = run.scored_panels()
    panel = panel or run.panel
    if panels and panel not in panels:
        raise ApplianceError(f"--panel: run '{run_id}' has no scores of panel '{panel}' (scored: {', '.join(panels)})")
    episodes = run.episodes()
    if not episodes:
        raise ApplianceError(f"{store.path}: run '{run_id}' has no {scenario} episodes")
    lengths = [(m.player, float(len(m.text))) for m in run.messages(speaker="player")]
    scores = run.scores(panels=[panel])
    all_lengths = [length for _, length in lengths]
    global_median = median(all_lengths) if all_lengths else None
    players = sorted({episode.player for episode in episodes})
    rows = [_row(player, episodes, lengths, scores, global_median, seed=index) for index, player in enumerate(players)]
    rows.sort(key=lambda row: -1.0 if row.ln_score is None else row.ln_score, reverse=True)
    calibration_ids = sorted({score.calibration_id for score in scores if score.calibration_id is not None})
    return PingPongLeaderboard(
        run_id=run_id,
        scenario=scenario,
        panel=panel,
        status=run.status,
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
    episodes: list[StoredEpisode],
    lengths: list[tuple[str, float]],
    scores: list[StoredScore],
    global_median: float | None,
    seed: int,
) -> PingPongRow:
    own_episodes = [e for e in episodes if e.player == player]
    per_episode: dict[str, dict[str, float | None]] = {}
    calibrated: list[float] = []
    for score in scores:
        if score.player == player:
            per_episode.setdefault(score.episode_id, {})[score.metric] = score.value
            if score.metric == "final" and score.calibrated_value is not None:
                calibrated.append(score.calibrated_value)

    def metric_values(metric: str) -> list[float]:
        return [v for metrics in per_episode.values() if (v := metrics.get(metric)) is not None]

    finals = metric_values("final")
    own_lengths = [length for length_player, length in lengths if length_player == player]
    model_median = median(own_lengths) if own_lengths else None
    factor = length_factor(model_median, global_median)
    refusals = metric_values("refusal")
    criterion_means = {c: (mean(values) if (values := metric_values(c)) else None) for c in CRITERIA}
    final = mean(finals) if finals else None
    final_ci = bootstrap_interval(finals, seed=seed)
    return PingPongRow(
        model=player,
        episodes=len(own_episodes),
        failed_episodes=sum(1 for e in own_episodes if not e.finished),
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
