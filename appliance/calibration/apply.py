"""Applying a calibration to the verdicts of a run.

A calibration maps each judge's summary score on one template (e.g. the
mean of the PingPong Likert criteria), or a likelihood judge's features, to
a human scale. A family names the template its judges use and the metric
that carries the calibrated value (under a likelihood panel, several metrics,
each calibrated to its own human criterion); the calibrated episode value is
the mean over judged targets (turns) of the calibrated panel value, stored
beside the raw one with the calibration id.

Which calibration: the newest one in the store for the panel, its judges,
the template and the template's current fingerprint (and the label set and
criterion the family asks for); else the one shipped in
judges/calibrations/ for that panel and template (copied into the store so
the run can name it). A calibration fitted for another version of the
template is never applied: `stale_calibrations` names it for the report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import mean

import numpy as np

from appliance.calibration.combiner import FeaturePanel
from appliance.calibration.features import PairFeatureCalibration
from appliance.calibration.models import RATING_KINDS, RatingCalibration, calibration_from_json
from appliance.calibration.shipped import SHIPPED_FOLDER
from appliance.catalog.panels import Panel
from appliance.judging.templates import REFUSAL, load_conversation_template, load_judge_template
from appliance.paths import judges_dir
from appliance.scenarios.base import Family, JudgedFamily, ScenarioFamily
from appliance.store import JudgmentRecord, ScoreRecord, Store
from appliance.store.labels import newest_calibrations, store_if_missing
from appliance.store.records import CalibrationRecord
from appliance.util.tomlfile import read_toml

#: the kinds of calibration a stage's calibrated metric takes, by what it maps (`JudgedFamily.calibrated_kind`)
APPLIED_KINDS = {"rating": RATING_KINDS, "pair": ("pair_features",)}


def calibrated_template(stage: JudgedFamily, panel: Panel) -> str | None:
    """The template whose verdicts the stage's calibration maps: the panel's own for a likelihood panel."""
    if panel.judging == "likelihood":
        return (stage.own_likelihood_template or panel.likelihood_template) if stage.scores_likelihood else None
    return stage.judge_template


def calibrated_metrics(stage: JudgedFamily, panel: Panel) -> dict[str, tuple[str, str] | None]:
    """Each episode metric a calibration of this panel maps, with the label set and criterion that
    calibration must be fitted on (None: whatever the panel was calibrated on)."""
    if panel.judging == "likelihood" and stage.likelihood_targets:
        return dict(stage.likelihood_targets)
    return {stage.calibrated_metric: None} if stage.calibrated_metric else {}


def calibration_key(stage: ScenarioFamily, metric: str) -> str:
    """Where a run's config names the calibration of a stage's metric: the stage's name for its main
    calibrated rating (as every stored run does), `stage:metric` for another criterion and for a pair's
    outcome (SimulBench's stages share one name: its ratings and its comparisons must not)."""
    if isinstance(stage, JudgedFamily) and stage.calibrated_kind == "rating" and metric == stage.calibrated_metric:
        return stage.name
    return f"{stage.name}:{metric}"


def pick_calibrations(
    store: Store, panel: Panel, families: Sequence[Family], judges_folder: Path | None = None
) -> dict[str, CalibrationRecord]:
    """Per calibrated stage and metric (`calibration_key`), the calibration its verdicts get (see the
    module docstring)."""
    folder = judges_folder or judges_dir()
    picked: dict[str, CalibrationRecord] = {}
    for stage in (stage for family in families for stage in family.stages()):
        if not isinstance(stage, JudgedFamily) or not stage.calibrated_metric:
            continue
        template = calibrated_template(stage, panel)
        if template is None:
            continue
        fingerprint = template_fingerprint(folder, template)
        candidates = [
            record
            for record in (
                *newest_calibrations(store, panel.name, template, list(panel.judges)),
                *shipped_calibrations(folder, panel, template),
            )
            if record.model.get("kind") in APPLIED_KINDS[stage.calibrated_kind]
            and record.model.get("template_fingerprint", fingerprint) == fingerprint
        ]
        for metric, target in calibrated_metrics(stage, panel).items():
            found = [r for r in candidates if target is None or (r.label_set, r.criterion) == target]
            if found:
                store_if_missing(store, found[0])
                picked[calibration_key(stage, metric)] = found[0]
    return picked


def unapplied_calibrations(
    store: Store, panel: Panel, families: Sequence[Family], judges_folder: Path | None = None
) -> dict[str, list[str]]:
    """Per template whose families got no calibration, the calibrations fitted for another version of it."""
    picked = pick_calibrations(store, panel, families, judges_folder)
    templates = {
        template
        for stage in (stage for family in families for stage in family.stages())
        if isinstance(stage, JudgedFamily) and stage.calibrated_metric and stage.name not in picked
        if (template := calibrated_template(stage, panel)) is not None
    }
    found = {t: stale_calibrations(store, panel, t, judges_folder) for t in sorted(templates)}
    return {template: ids for template, ids in found.items() if ids}


def template_fingerprint(folder: Path, template: str) -> str | None:
    path = folder / f"{template}.toml"
    if not path.is_file():
        return None
    if read_toml(path, "judge template").get("mode") == "conversation":
        return load_conversation_template(path).fingerprint()
    return load_judge_template(path).fingerprint()


def shipped_calibrations(folder: Path, panel: Panel, template: str) -> list[CalibrationRecord]:
    """Calibrations committed under judges/calibrations/<panel>/ for this template and the panel's judges."""
    records = []
    for path in sorted((folder / SHIPPED_FOLDER / panel.name).glob(f"{template}__*.json")):
        record = CalibrationRecord.model_validate_json(path.read_text())
        if sorted(record.judges) == sorted(panel.judges):
            records.append(record)
    return records


def stale_calibrations(store: Store, panel: Panel, template: str, folder: Path | None = None) -> list[str]:
    """Calibrations of this panel and template fitted for another version of the template (not applied)."""
    fingerprint = template_fingerprint(folder or judges_dir(), template)
    found = [*newest_calibrations(store, panel.name, template, list(panel.judges))]
    found += shipped_calibrations(folder or judges_dir(), panel, template)
    return sorted({r.calibration_id for r in found if r.model.get("template_fingerprint") not in (None, fingerprint)})


def stage_calibrations(
    stage: ScenarioFamily, calibrations: Mapping[str, CalibrationRecord]
) -> dict[str, CalibrationRecord | None] | None:
    """Each of the stage's calibrated metrics with the calibration it gets (None: none); None for a
    stage that has no calibrated metric."""
    if not isinstance(stage, JudgedFamily) or not stage.calibrated_metric:
        return None
    metrics = dict.fromkeys((stage.calibrated_metric, *stage.likelihood_targets))
    return {metric: calibrations.get(calibration_key(stage, metric)) for metric in metrics}


def calibrated_scores(
    stage: ScenarioFamily,
    scores: list[ScoreRecord],
    judgments: Sequence[JudgmentRecord],
    calibrations: Mapping[str, CalibrationRecord],
) -> list[ScoreRecord]:
    """An episode's scores with the calibrated value added to each calibrated metric, where one applies."""
    for metric, calibration in (stage_calibrations(stage, calibrations) or {}).items():
        if calibration is not None:
            scores = apply_calibration(scores, judgments, calibration, metric)
    return scores


def calibrated_features(
    stage: ScenarioFamily, calibrations: Mapping[str, CalibrationRecord]
) -> dict[str, frozenset[str]] | None:
    """Per judge, the features the calibrations of every one of the stage's calibrated metrics read; None
    where one of them has no feature calibration (then a judge reads every feature, for whatever maps it
    later). A stage may read just these: what else it reads reaches no calibrated figure."""
    records = stage_calibrations(stage, calibrations)
    if not records:
        return None
    needed: dict[str, set[str]] = {}
    for record in records.values():
        calibration = None if record is None else calibration_from_json(record.model)
        if not isinstance(calibration, FeaturePanel | PairFeatureCalibration):
            return None
        for judge, names in calibration.features_by_judge().items():
            needed.setdefault(judge, set()).update(names)
    return {judge: frozenset(names) for judge, names in needed.items()}


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


def judge_features(judgments: Sequence[JudgmentRecord], template: str) -> dict[int, dict[str, dict[str, float]]]:
    """Per target, each likelihood judge's features (one judgment row per feature)."""
    found: dict[int, dict[str, dict[str, float]]] = {}
    for judgment in judgments:
        if judgment.template == template and judgment.parsed and judgment.score is not None:
            found.setdefault(judgment.target_idx, {}).setdefault(judgment.judge, {})[judgment.criterion] = (
                judgment.score
            )
    return found


def _target_predictions(
    calibration: RatingCalibration | FeaturePanel | PairFeatureCalibration,
    judgments: Sequence[JudgmentRecord],
    template: str,
) -> list[float]:
    """The calibrated panel value of every judged target (a pair: +1, 0 or -1, the tie band applied)."""
    predicted: list[float] = []
    if not isinstance(calibration, RatingCalibration):
        needed = calibration.features_by_judge()
        for by_judge in judge_features(judgments, template).values():
            columns = {
                judge: {name: np.asarray([features.get(name, np.nan)]) for name in needed[judge]}
                for judge, features in by_judge.items()
                if judge in needed
            }
            if columns:
                predicted.append(float(calibration.predict(columns)[0]))
    else:
        for summaries in judge_summaries(judgments, template).values():
            predicted.append(float(calibration.predict({j: np.asarray([v]) for j, v in summaries.items()})[0]))
    return [value for value in predicted if np.isfinite(value)]


def apply_calibration(
    scores: list[ScoreRecord], judgments: Sequence[JudgmentRecord], record: CalibrationRecord, metric: str
) -> list[ScoreRecord]:
    calibration = calibration_from_json(record.model)
    assert isinstance(calibration, RatingCalibration | FeaturePanel | PairFeatureCalibration)
    per_target = _target_predictions(calibration, judgments, record.template)
    if not per_target:
        return scores
    value = mean(per_target)
    return [
        s.model_copy(update={"calibrated_value": value, "calibration_id": record.calibration_id})
        if s.metric == metric
        else s
        for s in scores
    ]
