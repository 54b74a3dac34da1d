"""A calibration applied as it is to another label set: what its numbers are worth beyond its labels.

A shipped calibration was fitted on FED; a user's replies are not FED's. Rating another label set of
the same kind with the calibration's own template and panel, and scoring its predictions against that
set's humans with nothing refitted, says how far the out-of-the-box numbers carry. Only rank and
linear agreement are reported: the two sets' human scales differ, so an error on one scale means
nothing on the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from appliance.calibration.combiner import FeaturePanel
from appliance.calibration.heldout import like_for_like, rating_ceiling, with_intervals
from appliance.calibration.models import RATING_KINDS, RatingCalibration, calibration_from_json
from appliance.calibration.shipped import SHIPPED_FOLDER
from appliance.calibration.tables import ItemTable
from appliance.catalog.panels import Panel
from appliance.errors import ApplianceError
from appliance.judging.templates import JudgeTemplate
from appliance.store import Store
from appliance.store.labels import find_calibration_record
from appliance.store.records import CalibrationRecord
from appliance.util.agreement import kendall_tau_b, pearson, spearman


def find_calibration(store: Store, judges_folder: Path, calibration_id: str) -> CalibrationRecord:
    """The calibration with this id in the store, else among the shipped ones."""
    if (stored := find_calibration_record(store, calibration_id)) is not None:
        return stored
    for path in sorted((judges_folder / SHIPPED_FOLDER).glob("*/*.json")):
        record = CalibrationRecord.model_validate_json(path.read_text())
        if record.calibration_id == calibration_id:
            return record
    raise ApplianceError(
        f"--transfer: no calibration '{calibration_id}' in {store.path} or {judges_folder / SHIPPED_FOLDER}"
    )


def check_transfer(record: CalibrationRecord, panel: Panel, template: JudgeTemplate, kind: str) -> None:
    """A transfer needs the calibration's panel judges, its template as it was, and ratings."""
    if record.model.get("kind") not in RATING_KINDS or kind == "pairwise":
        raise ApplianceError(f"--transfer: calibration '{record.calibration_id}' and a {kind} set: ratings only")
    if sorted(record.judges) != sorted(panel.judges):
        raise ApplianceError(
            f"--transfer: calibration '{record.calibration_id}' has judges {sorted(record.judges)}; panel "
            f"'{panel.name}' has {sorted(panel.judges)}"
        )
    if record.template != template.name or record.model.get("template_fingerprint") != template.fingerprint():
        raise ApplianceError(
            f"--transfer: calibration '{record.calibration_id}' was fitted with template '{record.template}' "
            f"(fingerprint {record.model.get('template_fingerprint')}); this set is rated with '{template.name}' "
            f"(fingerprint {template.fingerprint()})"
        )


def _rank_metrics(predicted: np.ndarray, table: ItemTable) -> dict[str, float | None]:
    present = np.isfinite(predicted) & np.isfinite(table.human)
    x, y = predicted[present], table.human[present]
    return {
        "spearman": spearman(x, y),
        "kendall": kendall_tau_b(x, y),
        "pearson": pearson(x, y),
        "spearman_like_for_like": like_for_like(predicted, table),
    }


def transfer_report(record: CalibrationRecord, table: ItemTable, *, seed: int, resamples: int) -> dict[str, Any]:
    """The calibration's predictions on every item against the humans, beside the plain panel mean (the
    judges' summary scores standardised on these items: no labels used) and the human ceiling."""
    calibration = calibration_from_json(record.model)
    assert isinstance(calibration, RatingCalibration | FeaturePanel)

    def transferred(t: ItemTable) -> np.ndarray:
        if isinstance(calibration, RatingCalibration):
            return calibration.predict(t.judges)
        return calibration.predict(t.features)

    def panel_mean(t: ItemTable) -> np.ndarray:
        stacked = np.vstack([(v - np.nanmean(v)) / (np.nanstd(v) or 1.0) for v in t.judges.values()])
        with np.errstate(invalid="ignore"):
            means: np.ndarray = np.nanmean(stacked, axis=0)
        return means

    def row(predict: Any) -> dict[str, Any]:
        scored = with_intervals(table, lambda t: _rank_metrics(predict(t), t), seed, resamples)
        return scored | {"n": int(np.count_nonzero(np.isfinite(predict(table)) & np.isfinite(table.human)))}

    source = record.metrics.get("panel_calibrated", {}).get("spearman", {})
    return {
        "calibration_id": record.calibration_id,
        "fitted_on": {"label_set": record.label_set, "criterion": record.criterion, "heldout_spearman": source},
        "panel_transferred": row(transferred),
        "panel_mean": row(panel_mean),
        "human_ceiling": rating_ceiling(table, seed, resamples),
    }
