"""Calibrations shipped with the project: judges/calibrations/<panel>/<template>__<labels>__<criterion>.*

`appliance calibrate --ship` writes the calibration (`.json`, what runs apply when the store has
no newer one) and its held-out report (`.md`, for people); `make calibrations` regenerates every
shipped file from the human labels in ../shared.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from appliance.store.records import CalibrationRecord

SHIPPED_FOLDER = "calibrations"
#: the held-out metrics a calibration's rows show, by its kind: ratings against the human mean; pairs
#: against the human majority (+1, 0, -1), with the position bias only sampled verdicts in both orders have
RATING_METRICS = ("spearman", "spearman_like_for_like", "kendall", "pearson", "krippendorff_alpha", "mae")
PAIR_METRICS = {"pairwise": ("kappa", "agreement", "position_bias"), "pair_features": ("kappa", "agreement")}


def report_metrics(kind: str | None) -> tuple[str, ...]:
    """The columns of a calibration report of this kind (`CalibrationRecord.model["kind"]`)."""
    return PAIR_METRICS.get(kind or "", RATING_METRICS)


def shipped_stem(record: CalibrationRecord) -> str:
    criterion = re.sub(r"[^A-Za-z0-9]+", "-", record.criterion).strip("-")
    return f"{record.template}__{record.label_set}__{criterion}"


def write_shipped(judges_folder: Path, record: CalibrationRecord, report: dict[str, Any]) -> tuple[Path, Path]:
    folder = judges_folder / SHIPPED_FOLDER / record.panel
    folder.mkdir(parents=True, exist_ok=True)
    stem = shipped_stem(record)
    calibration = folder / f"{stem}.json"
    calibration.write_text(record.model_dump_json(indent=1) + "\n")
    held_out = folder / f"{stem}.md"
    held_out.write_text(report_markdown(record, report))
    return calibration, held_out


def combiner_sentence(combiner: dict[str, Any]) -> str:
    """How the panel's features were combined, and what each candidate scored inside the fitting part."""
    scores = ", ".join(
        f"{name} {'-' if value is None else f'{value:.3f}'}"
        for name, value in combiner["cross_validated_spearman"].items()
    )
    lead, error = combiner.get("lead_over_default"), combiner.get("standard_error")
    duel = (
        f"; the best challenger led the default ({combiner.get('default')}) by {lead:.3f} (standard error "
        f"{error:.3f}, needed more "
        f"than {combiner.get('margin', 0.5)} of it)"
        if lead is not None and error is not None
        else ""
    )
    return (
        f"Combination chosen on the fitting part: {combiner['chosen']} (cross-validated Spearman inside the "
        f"fitting part: {scores}{duel})."
    )


def pair_features_sentence(model: dict[str, Any]) -> str:
    """How a pairwise calibration decides: the feature set chosen on the fitting part, and its tie band."""
    scores = ", ".join(f"{name} {value:.3f}" for name, value in model.get("fit_agreement", {}).items())
    return (
        f"Panel calibrated = a ridge regression through the origin of the human majority (+1, 0, -1) on the pair's "
        f"feature differences (equal responses tie), on the feature set chosen on the fitting part: "
        f"{model.get('feature_set', 'every feature')} "
        f"(out-of-fold agreement inside the fitting part: {scores or '-'}); {_tie_words(model)}. A feature alone = "
        "its sign, oriented on the fitting part; "
        "length_baseline = the longer response wins."
    )


def _tie_words(model: dict[str, Any]) -> str:
    band = float(model.get("tie_band", 0.0))
    return f"a tie within {band:g} of 0" if band > 0 else "no tie band chosen (a tie only at exactly 0)"


def _cell(metric: Any) -> str:
    if not isinstance(metric, dict) or metric.get("value") is None:
        return "-"
    ci = metric.get("ci")
    return f"{metric['value']:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def report_markdown(record: CalibrationRecord, report: dict[str, Any]) -> str:
    """The held-out report as a Markdown table, with what was fitted and how it was measured."""
    rows: list[tuple[str, dict[str, Any]]] = []
    pairs = record.model.get("kind") in PAIR_METRICS
    for judge, row in report["judges"].items():
        rows.append((f"{judge} ({'its calibrated preference' if pairs else 'summary feature alone'})", row))
        if "calibrated" in row:
            rows.append((f"{judge} (calibrated)", row["calibrated"]))
    rows += [(key, report[key]) for key in ("panel_mean", "panel_calibrated", "human_ceiling", "length_baseline")]
    if best := report.get("fit_best_feature"):
        rows.append((f"fit-best feature ({best['judge']}: {best['feature']})", best))
    for judge, by_feature in report.get("features", {}).items():
        rows += [(f"{judge}: {name} alone", row) for name, row in by_feature.items()]
    weights = record.model.get("weights", {})
    metrics = report_metrics(record.model.get("kind"))
    lines = [
        f"# Calibration {record.calibration_id}",
        "",
        f"Panel `{record.panel}` ({', '.join(record.judges)}), template `{record.template}` "
        f"(fingerprint {record.model.get('template_fingerprint')}), label set `{record.label_set}`, "
        f"criterion `{record.criterion}`, human scale {record.model.get('human_scale')} (from the fitting part).",
        f"Items: {len(record.fit_items)} fitted, {len(record.heldout_items)} held out (seed {record.seed}). "
        + (
            combiner_sentence(report["combiner"])
            if "combiner" in report
            else pair_features_sentence(record.model)
            if record.model.get("kind") == "pair_features"
            else f"Panel weights (cross-fitted): {', '.join(f'{j} {w:.2f}' for j, w in weights.items())}."
        ),
        "",
        (
            "Held-out agreement with the human majority (+1, tie 0, -1), 95% bootstrap intervals (items sharing "
            "a context resampled together). `human_ceiling`: each annotator against the majority of the others."
            if pairs
            else "Held-out agreement with the human mean, 95% bootstrap intervals (items sharing a context "
            "resampled together). `spearman_like_for_like`: against the mean of all annotators but one, averaged "
            "over the one left out, which is how `human_ceiling` compares an annotator with the others."
        ),
        "",
        "| row | n | " + " | ".join(metrics) + " |",
        "|---|---:|" + "---:|" * len(metrics),
    ]
    for label, row in rows:
        count = row.get("n", row.get("annotators", ""))
        lines.append(f"| {label} | {count} | " + " | ".join(_cell(row.get(m)) for m in metrics) + " |")
    if unmeasured := report["human_ceiling"].get("not_measurable"):
        lines += ["", f"Human ceiling: {unmeasured}."]
    if "curve" in report:
        from appliance.calibration.curve import CURVE_HEADERS, curve_cells

        lines += [
            "",
            f"Learning curve: held-out Spearman, mean over {report['curve']['splits']} seeded splits (95% "
            "bootstrap interval of the mean; the splits share items), each fitted on that many of its fitting "
            "items.",
            "",
            "| " + " | ".join(CURVE_HEADERS) + " |",
            "|" + "---:|" * (len(CURVE_HEADERS) - 1) + "---|",
        ]
        lines += ["| " + " | ".join(cells) + " |" for cells in curve_cells(report["curve"])]
    return "\n".join(lines) + "\n"
