"""PNG of judge vs human scores on the held-out items, before and after calibration."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from appliance.calibration.combiner import Blend, FeatureAverage
from appliance.calibration.features import FeatureCalibration, PairFeatureCalibration, decide
from appliance.calibration.models import RatingCalibration, calibration_from_json, rescale, vote
from appliance.calibration.tables import ItemTable


def write_plot(path: Path, held: ItemTable, kind: str, summary: dict[str, Any]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    calibration = calibration_from_json(summary["model"])
    title = f"{summary['panel']} on {summary['label_set']} / {summary['criterion']} (held-out, n={len(held)})"
    if kind == "pairwise":
        if isinstance(calibration, PairFeatureCalibration):
            # the first judge the fit kept, alone (a fit on few items may keep none)
            panels = [
                (
                    f"{judge} (calibrated)",
                    decide(calibration.features.judge_prediction(judge, held.features[judge]), calibration.tie_band),
                )
                for judge in list(calibration.features.judges)[:1]
            ]
            panels.append(("panel calibrated", calibration.predict(held.features)))
        else:
            equal = {j: 1.0 for j in held.judges}
            panels = [("panel mean", vote(held, equal, 0.0))]
            panels.append(("panel calibrated", calibration.predict(held)))  # type: ignore[arg-type]
        figure, grid = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4), squeeze=False)
        for axis, (label, predicted) in zip(grid[0], panels, strict=True):
            _confusion(axis, predicted, held.human, label)
    else:
        judge_scale = tuple(summary["judge_scale"])
        human_scale = tuple(summary["human_scale"])
        panels = _rating_panels(calibration, held, judge_scale, human_scale)
        figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4), squeeze=False)
        rng = np.random.default_rng(0)
        for axis, (label, predicted) in zip(axes[0], panels, strict=True):
            jitter = rng.uniform(-0.06, 0.06, size=predicted.size) * (human_scale[1] - human_scale[0])
            axis.scatter(predicted + jitter, held.human, s=9, alpha=0.5)
            axis.plot(human_scale, human_scale, color="grey", linewidth=1)
            axis.set_xlim(human_scale[0] - 0.3, human_scale[1] + 0.3)
            axis.set_ylim(human_scale[0] - 0.3, human_scale[1] + 0.3)
            axis.set_xlabel(label)
            axis.set_ylabel("human mean")
    # about 11 characters of 10-point text to an inch: a one-panel figure wraps the title rather than cut it
    figure.suptitle(textwrap.fill(title, width=int(figure.get_figwidth() * 11)), fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _rating_panels(
    calibration: Any, held: ItemTable, judge_scale: tuple[float, float], human_scale: tuple[float, float]
) -> list[tuple[str, np.ndarray]]:
    """What each scatter plots against the human mean: each judge (calibrated, or raw and rescaled), then the panel."""
    if isinstance(calibration, FeatureCalibration):
        panels: list[tuple[str, np.ndarray]] = [
            (f"{j} (calibrated)", calibration.judge_prediction(j, held.features[j])) for j in calibration.judges
        ]
        panels.append(("panel calibrated", calibration.predict(held.features)))
    elif isinstance(calibration, FeatureAverage | Blend):
        panels = [(f"panel calibrated ({calibration.label})", calibration.predict(held.features))]
    else:
        assert isinstance(calibration, RatingCalibration)
        panels = [(f"{j} (raw, rescaled)", rescale(v, judge_scale, human_scale)) for j, v in held.judges.items()]
        panels.append(("panel calibrated", calibration.predict(held.judges)))
    return panels


def _confusion(axis: Any, predicted: np.ndarray, human: np.ndarray, label: str) -> None:
    classes = (1.0, 0.0, -1.0)
    names = ("A", "tie", "B")
    matrix = np.zeros((3, 3))
    for i, h in enumerate(classes):
        for j, p in enumerate(classes):
            matrix[i, j] = np.count_nonzero((human == h) & (predicted == p))
    axis.imshow(matrix, cmap="Blues")
    for i in range(3):
        for j in range(3):
            axis.text(j, i, int(matrix[i, j]), ha="center", va="center")
    axis.set_xticks(range(3), names)
    axis.set_yticks(range(3), names)
    axis.set_xlabel(label)
    axis.set_ylabel("human majority")
