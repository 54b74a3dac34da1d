"""Applying a stored calibration to the verdicts of a run.

A calibration maps each judge's summary score on one template (e.g. the
mean of the PingPong Likert criteria) to a human scale. A family names the
template its judges use and the metric that carries the calibrated value;
the calibrated episode value is the mean over judged targets (turns) of the
calibrated panel value, stored beside the raw one with the calibration id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import mean

import numpy as np

from appliance.calibration.models import RatingCalibration, calibration_from_json
from appliance.judging.panels import Panel
from appliance.judging.templates import REFUSAL
from appliance.scenarios.base import Family, JudgedFamily, ScenarioFamily
from appliance.store import JudgmentRecord, ScoreRecord, Store
from appliance.store.labels import latest_calibration
from appliance.store.records import CalibrationRecord


def pick_calibrations(store: Store, panel: Panel, families: Sequence[Family]) -> dict[str, CalibrationRecord]:
    """The newest rating calibration of this panel for the judge template of each family's calibrated stage."""
    picked: dict[str, CalibrationRecord] = {}
    for stage in (stage for family in families for stage in family.stages()):
        if not isinstance(stage, JudgedFamily) or not stage.judge_template or not stage.calibrated_metric:
            continue
        record = latest_calibration(store, panel.name, stage.judge_template, list(panel.judges))
        if record is not None and record.model.get("kind") == "rating":
            picked[stage.name] = record
    return picked


def calibrated_scores(
    stage: ScenarioFamily,
    scores: list[ScoreRecord],
    judgments: Sequence[JudgmentRecord],
    calibrations: Mapping[str, CalibrationRecord],
) -> list[ScoreRecord]:
    """An episode's scores with the calibrated value added to the stage's calibrated metric, where one applies."""
    calibration = calibrations.get(stage.name)
    if calibration is None or not isinstance(stage, JudgedFamily) or not stage.calibrated_metric:
        return scores
    return apply_calibration(scores, judgments, calibration, stage.calibrated_metric)


def judge_summaries(judgments: Sequence[JudgmentRecord], template: str) -> dict[int, dict[str, float]]:
    """Per target, each judge's summary score: the mean of its parsed criteria (refusal flag excluded)."""
    grouped: dict[tuple[int, str], list[float]] = {}
    for judgment in judgments:
        if judgment.template != template or not judgment.parsed or judgment.score is None:
            continue
        if judgment.criterion == REFUSAL or judgment.order_swapped:
            continue
        grouped.setdefault((judgment.target_idx, judgment.judge), []).append(judgment.score)
    summaries: dict[int, dict[str, float]] = {}
    for (target, judge), values in grouped.items():
        summaries.setdefault(target, {})[judge] = mean(values)
    return summaries


def apply_calibration(
    scores: list[ScoreRecord], judgments: Sequence[JudgmentRecord], record: CalibrationRecord, metric: str
) -> list[ScoreRecord]:
    calibration = calibration_from_json(record.model)
    assert isinstance(calibration, RatingCalibration)
    per_target = []
    for by_judge in judge_summaries(judgments, record.template).values():
        predicted = calibration.predict({judge: np.asarray([value]) for judge, value in by_judge.items()})[0]
        if np.isfinite(predicted):
            per_target.append(float(predicted))
    if not per_target:
        return scores
    value = mean(per_target)
    return [
        s.model_copy(update={"calibrated_value": value, "calibration_id": record.calibration_id})
        if s.metric == metric
        else s
        for s in scores
    ]
