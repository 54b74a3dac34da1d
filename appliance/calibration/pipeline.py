"""`appliance calibrate`: rate labelled items with a panel, split, fit on one part, report on the other.

The split is made before anything is fitted and the fitting functions only
ever receive the fitting part's table, so held-out labels cannot leak into
the maps or weights (tests/test_calibration.py proves it).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from appliance.calibration.collect import VerdictKey, collect_verdicts
from appliance.calibration.combiner import fit_feature_calibration
from appliance.calibration.curve import learning_curve
from appliance.calibration.features import fit_pair_feature_calibration
from appliance.calibration.heldout import feature_report, pair_feature_report, pairwise_report, rating_report
from appliance.calibration.models import fit_pairwise_calibration, fit_rating_calibration
from appliance.calibration.tables import ItemTable, majority, split_items
from appliance.calibration.transfer import check_transfer, find_calibration, transfer_report
from appliance.catalog.models import Catalog
from appliance.catalog.panels import Panel
from appliance.engine.factory import open_backend
from appliance.episodes.roles import BackendFactory
from appliance.errors import ApplianceError
from appliance.judging.scoring_templates import ExpectedScoreTemplate, LikelihoodTemplate
from appliance.judging.templates import JudgeTemplate, PairwiseTemplate, load_judge_template
from appliance.labels.model import PAIRWISE_CRITERION, LabelItem, LabelSet
from appliance.store import Store
from appliance.store.labels import load_label_set, write_calibration
from appliance.store.records import CalibrationRecord, LabelVerdict

#: the template a label set of each kind is rated with when none is named: a sampled panel's ...
DEFAULT_TEMPLATES = {"turn": "turn_rating", "dialogue": "dialogue_rating", "pairwise": "pairwise_preference"}
#: ... and a panel's that reads probabilities (turn sets: the panel's own `likelihood_template`)
DEFAULT_LIKELIHOOD_TEMPLATES = {"dialogue": "dialogue_followups", "pairwise": "instruction_likelihood"}
PREFERRED_CRITERIA = ("Overall", "overall", "human (overall)")


@dataclass
class CalibrationRequest:
    panel: Panel
    label_set: str
    criterion: str | None = None
    template: str | None = None
    limit: int | None = None
    heldout_fraction: float = 0.5
    seed: int = 0
    parallel: int = 16
    #: bootstrap resamples for every interval
    resamples: int = 1000
    #: also refit on growing parts of several seeded splits (`curve.learning_curve`)
    curve: bool = False


@dataclass
class CalibrationOutcome:
    record: CalibrationRecord
    report: dict[str, Any]
    fit: ItemTable
    held: ItemTable
    kind: str


def choose_criterion(label_set: LabelSet, criterion: str | None) -> str:
    criteria = label_set.criteria()
    if criterion is None:
        preferred = [c for c in PREFERRED_CRITERIA if c in criteria]
        if label_set.kind == "pairwise":
            return PAIRWISE_CRITERION
        if len(criteria) == 1:
            return criteria[0]
        if preferred:
            return preferred[0]
        raise ApplianceError(f"--criterion: label set '{label_set.name}' needs one of: {', '.join(criteria)}")
    if criterion not in criteria:
        raise ApplianceError(
            f"--criterion: '{criterion}' is not in label set '{label_set.name}' (known: {', '.join(criteria)})"
        )
    return criterion


def labelled_items(label_set: LabelSet, criterion: str, limit: int | None, seed: int) -> list[LabelItem]:
    """The items the criterion's human values rate, a seeded sample if limited.

    Where most items carry two values or more, items with fewer are left out: the target is then a
    consensus of raters. A set with one value per item (a consensus label, a lab's single rater) is
    fitted on those values; its human ceiling is reported as not measurable."""
    counts: dict[str, int] = {}
    for label in label_set.labels:
        if label.criterion == criterion and label.value is not None:
            counts[label.item_id] = counts.get(label.item_id, 0) + 1
    needed = 2 if 2 * sum(count >= 2 for count in counts.values()) >= max(len(counts), 1) else 1
    items = [item for item in label_set.items if counts.get(item.item_id, 0) >= needed]
    if limit is not None and limit < len(items):
        items = sorted(random.Random(seed).sample(items, limit), key=lambda item: item.item_id)
    if len(items) < 4:
        raise ApplianceError(f"--labels: label set '{label_set.name}' has {len(items)} usable items for '{criterion}'")
    return items


def build_table(
    label_set: LabelSet,
    criterion: str,
    items: list[LabelItem],
    verdicts: dict[VerdictKey, LabelVerdict],
    judges: list[str],
) -> ItemTable:
    ids = [item.item_id for item in items]
    values = _annotator_values(label_set, criterion, {item_id: index for index, item_id in enumerate(ids)})
    stacked = np.vstack(list(values.values()))
    pairwise = label_set.kind == "pairwise"

    def scores(judge: str, swapped: bool) -> np.ndarray:
        found = [verdicts.get((item_id, judge, swapped)) for item_id in ids]
        return np.asarray([np.nan if v is None or v.score is None else v.score for v in found], dtype=float)

    def features(judge: str) -> dict[str, np.ndarray]:
        found = [verdicts.get((item_id, judge, False)) for item_id in ids]
        names = sorted({name for v in found if v is not None for name in v.features})
        return {
            name: np.asarray([np.nan if v is None else v.features.get(name, np.nan) for v in found], dtype=float)
            for name in names
        }

    if pairwise:
        human = np.asarray([majority(stacked[:, i]) for i in range(len(ids))])
        length = np.asarray(
            [np.sign(len(i.texts["response_a"]) - len(i.texts["response_b"])) for i in items], dtype=float
        )
    else:
        counts = np.isfinite(stacked).sum(axis=0)
        human = np.nansum(stacked, axis=0) / np.maximum(counts, 1)
        key = "response" if label_set.kind == "turn" else "dialogue"
        length = np.asarray([len(i.texts[key]) for i in items], dtype=float)
    by_judge = {j: features(j) for j in judges}
    shared_context = label_set.kind == "turn" and all("context" in item.texts for item in items)
    return ItemTable(
        item_ids=tuple(ids),
        judges={j: scores(j, False) for j in judges},
        human=human,
        annotators=values,
        length=length,
        swapped={j: scores(j, True) for j in judges} if pairwise and not any(by_judge.values()) else None,
        features={j: columns for j, columns in by_judge.items() if columns},
        clusters=np.asarray([item.texts["context"] for item in items]) if shared_context else None,
    )


def _annotator_values(label_set: LabelSet, criterion: str, row: dict[str, int]) -> dict[str, np.ndarray]:
    """Each annotator's values of `criterion`, one column per item (`row`: item id -> index), NaN where missing."""
    annotators = sorted({x.annotator for x in label_set.labels if x.criterion == criterion and x.item_id in row})
    values = {a: np.full(len(row), np.nan) for a in annotators}
    for label in label_set.labels:
        if label.criterion == criterion and label.item_id in row and label.value is not None:
            values[label.annotator][row[label.item_id]] = label.value
    return values


def default_template(label_set: LabelSet, panel: Panel) -> str:
    """What a label set is rated with when no template is named: a likelihood panel reads
    probabilities (turn items with the template its runs use, so its calibrations apply to them)."""
    if panel.judging != "likelihood":
        return DEFAULT_TEMPLATES[label_set.kind]
    return panel.likelihood_template if label_set.kind == "turn" else DEFAULT_LIKELIHOOD_TEMPLATES[label_set.kind]


def resolve_template(label_set: LabelSet, name: str | None, judges_dir: Path, panel: Panel) -> JudgeTemplate:
    chosen = name or default_template(label_set, panel)
    path = judges_dir / f"{chosen}.toml"
    if not path.is_file():
        raise ApplianceError(f"--template: {path} not found")
    template = load_judge_template(path)
    scoring = isinstance(template, LikelihoodTemplate | ExpectedScoreTemplate)
    if not scoring and (label_set.kind == "pairwise") != isinstance(template, PairwiseTemplate):
        raise ApplianceError(
            f"--template: '{chosen}' is a {template.mode} template; label set '{label_set.name}' is {label_set.kind}"
        )
    return template


@dataclass
class RatedItems:
    """A label set's items rated by a panel: what a calibration is fitted on, or a transfer scored on."""

    criterion: str
    verdicts: dict[VerdictKey, LabelVerdict]
    table: ItemTable


def rate_items(
    store: Store,
    catalog: Catalog,
    request: CalibrationRequest,
    label_set: LabelSet,
    template: JudgeTemplate,
    *,
    backend_factory: BackendFactory,
    on_item: Callable[[int, int], None] | None,
) -> RatedItems:
    """The panel's verdicts on the labelled items (stored ones reused), as a table."""
    criterion = choose_criterion(label_set, request.criterion)
    for judge in request.panel.judges:
        catalog.get(judge)
    items = labelled_items(label_set, criterion, request.limit, request.seed)
    verdicts = collect_verdicts(
        store,
        catalog,
        request.panel,
        label_set,
        template,
        criterion,
        items,
        seed=request.seed,
        parallel=request.parallel,
        backend_factory=backend_factory,
        on_item=on_item,
    )
    table = build_table(label_set, criterion, items, verdicts, request.panel.judges)
    return RatedItems(criterion, verdicts, table)


def run_transfer(
    store: Store,
    catalog: Catalog,
    request: CalibrationRequest,
    calibration_id: str,
    judges_dir: Path,
    *,
    backend_factory: BackendFactory = open_backend,
    on_item: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """A stored or shipped calibration applied, unrefitted, to every item of another label set
    (`transfer.transfer_report`); rated with the calibration's template."""
    if request.curve:
        raise ApplianceError("--curve and --transfer: a transfer fits nothing, so it has no learning curve")
    record = find_calibration(store, judges_dir, calibration_id)
    label_set = load_label_set(store, request.label_set)
    template = resolve_template(label_set, request.template or record.template, judges_dir, request.panel)
    check_transfer(record, request.panel, template, label_set.kind)
    rated = rate_items(store, catalog, request, label_set, template, backend_factory=backend_factory, on_item=on_item)
    report = transfer_report(record, rated.table, seed=request.seed, resamples=request.resamples)
    unparsed = _unparsed_counts(rated.verdicts, set(rated.table.item_ids), request.panel.judges)
    return {
        "panel": request.panel.name,
        "label_set": label_set.name,
        "criterion": rated.criterion,
        "template": template.name,
        "items": len(rated.table),
        "unparsed_verdicts": unparsed,
    } | report


def run_calibration(
    store: Store,
    catalog: Catalog,
    request: CalibrationRequest,
    judges_dir: Path,
    *,
    backend_factory: BackendFactory = open_backend,
    on_item: Callable[[int, int], None] | None = None,
) -> CalibrationOutcome:
    label_set = load_label_set(store, request.label_set)
    template = resolve_template(label_set, request.template, judges_dir, request.panel)
    if request.curve and (label_set.kind == "pairwise" or not isinstance(template, LikelihoodTemplate)):
        raise ApplianceError(
            f"--curve: learning curves are drawn for ratings read from probabilities; template '{template.name}' "
            f"on {label_set.kind} set '{label_set.name}' is not one"
        )
    rated = rate_items(store, catalog, request, label_set, template, backend_factory=backend_factory, on_item=on_item)
    criterion, verdicts, table = rated.criterion, rated.verdicts, rated.table
    fit_ids, held_ids = split_items(list(table.item_ids), request.seed, request.heldout_fraction)
    fit, held = table.subset(fit_ids), table.subset(held_ids)
    human_scale = fit.annotator_range()  # from the fitting part only
    judge_scale = getattr(template, "scale", human_scale)
    summary = getattr(template, "summary", None)
    calibration, report = _fit_and_report(label_set.kind, fit, held, judge_scale, human_scale, summary, request)
    if request.curve:
        curve_seed, fraction = request.seed, request.heldout_fraction
        report["curve"] = learning_curve(table, summary=summary, seed=curve_seed, heldout_fraction=fraction)
    record = CalibrationRecord(
        calibration_id=datetime.now(UTC).strftime("cal-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:4],
        created_at=datetime.now(UTC).replace(tzinfo=None),
        panel=request.panel.name,
        judges=list(request.panel.judges),
        label_set=label_set.name,
        criterion=criterion,
        template=template.name,
        seed=request.seed,
        fit_items=fit_ids,
        heldout_items=held_ids,
        model=calibration.to_json()
        | {
            "judge_scale": list(judge_scale),
            "human_scale": list(human_scale),
            "template_fingerprint": template.fingerprint(),
            "summary": summary,
        },
        metrics=report,
    )
    write_calibration(store, record)
    summary = _summary(record, label_set.kind, _unparsed_counts(verdicts, set(table.item_ids), request.panel.judges))
    return CalibrationOutcome(record, summary | report, fit, held, label_set.kind)


def _summary(record: CalibrationRecord, kind: str, unparsed: dict[str, int]) -> dict[str, Any]:
    """What `appliance calibrate` prints above the held-out report."""
    return {
        "calibration_id": record.calibration_id,
        "panel": record.panel,
        "label_set": record.label_set,
        "kind": kind,
        "criterion": record.criterion,
        "template": record.template,
        "human_scale": record.model["human_scale"],
        "judge_scale": record.model["judge_scale"],
        "items": {"fit": len(record.fit_items), "heldout": len(record.heldout_items)},
        "unparsed_verdicts": unparsed,
        "model": record.model,
    }


def _fit_and_report(
    kind: str,
    fit: ItemTable,
    held: ItemTable,
    judge_scale: tuple[float, float],
    human_scale: tuple[float, float],
    summary: str | None,
    request: CalibrationRequest,
) -> tuple[Any, dict[str, Any]]:
    """The calibration fitted on the fitting part, and its report on the held-out part."""
    if fit.features and kind == "pairwise":
        pair = fit_pair_feature_calibration(fit.features, fit.human, seed=request.seed)
        return pair, pair_feature_report(fit, held, pair, seed=request.seed, resamples=request.resamples)
    if fit.features:
        combination = fit_feature_calibration(fit.features, fit.human, human_scale, summary=summary, seed=request.seed)
        report = feature_report(fit, held, combination, seed=request.seed, resamples=request.resamples)
        return combination.model, report
    if kind == "pairwise":
        pairwise = fit_pairwise_calibration(fit)
        return pairwise, pairwise_report(fit, held, pairwise, seed=request.seed, resamples=request.resamples)
    rating = fit_rating_calibration(fit, request.seed)
    report = rating_report(
        fit,
        held,
        rating,
        judge_scale=judge_scale,
        human_scale=human_scale,
        seed=request.seed,
        resamples=request.resamples,
    )
    return rating, report


def _unparsed_counts(verdicts: dict[VerdictKey, LabelVerdict], used: set[str], judges: Sequence[str]) -> dict[str, int]:
    """Per judge, the verdicts on the items in the table that did not parse."""
    return {
        judge: sum(1 for (item_id, j, _), v in verdicts.items() if j == judge and item_id in used and not v.parsed)
        for judge in judges
    }
