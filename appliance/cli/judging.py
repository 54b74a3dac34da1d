"""CLI verbs about judges: `labels import|list`, `calibrate`, `score`."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from appliance.catalog.models import sha256_of
from appliance.cli.options import (
    DbOption,
    JsonOption,
    ModelsOption,
    PanelOption,
    console,
    error_console,
    load_models,
    load_panel,
)
from appliance.cli.store import report_store_check
from appliance.paths import judges_dir
from appliance.store import Store

if TYPE_CHECKING:
    from appliance.calibration.pipeline import CalibrationOutcome
    from appliance.store.labels import StoredLabelSet

labels_app = typer.Typer(no_args_is_help=True, help="Human labels that judges are calibrated against.")

LABEL_FORMATS = "fed | usr | dstc9 | pandalm | jsonl"


def _progress(label: str, quiet: bool) -> Progress:
    return Progress(
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=error_console,
        disable=quiet or not error_console.is_terminal,
    )


@labels_app.command("import")
def labels_import(
    path: Annotated[Path, typer.Argument(help="label file (a folder for dstc9)")],
    format_name: Annotated[str, typer.Option("--format", help=LABEL_FORMATS)],
    name: Annotated[str | None, typer.Option(help="label set name (jsonl: default the file name)")] = None,
    kind: Annotated[str, typer.Option(help="jsonl only: turn | dialogue | pairwise")] = "turn",
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Store human labels, one row per annotator, item and criterion; re-importing a set replaces it.

    JSONL streams into the store in chunks inside one transaction (files of any size); the
    published formats are read whole and checked before the store opens."""
    stored = _store_labels(path, format_name, name, kind, db)
    rows = [
        {
            "label_set": s.name,
            "kind": s.kind,
            "items": s.items,
            "annotators": len(s.annotators),
            "labels": s.labels,
            "missing": s.missing,
            "criteria": s.criteria(),
        }
        for s in stored
    ]
    if as_json:
        print(json.dumps(rows))
        return
    for row in rows:
        console.print(
            f"imported label set '{row['label_set']}' ({row['kind']}): {row['items']} items, "
            f"{row['annotators']} annotators, {row['labels']} labels ({row['missing']} not numeric, kept as missing), "
            f"criteria: {', '.join(row['criteria'])}"  # type: ignore[arg-type]
        )


def _store_labels(path: Path, format_name: str, name: str | None, kind: str, db: Path | None) -> list[StoredLabelSet]:
    """Read and store one label file (or a dstc9 folder); the published formats are checked before the store opens."""
    from appliance.errors import ApplianceError, reading
    from appliance.labels import read_labels
    from appliance.labels.importers import check_kind, declared_scales, iter_jsonl_records
    from appliance.store.labels import LabelSetHeader, stream_label_set, write_label_set

    files = [path] if path.is_file() else sorted(path.glob("*.json"))
    stored: list[StoredLabelSet] = []
    if format_name == "jsonl":
        checked = check_kind(kind)
        if not path.is_file():
            raise ApplianceError(f"{path}: file not found")
        digest = sha256_of(path, use_cache=False)
        header = LabelSetHeader(name or path.stem, checked, "jsonl", str(path), digest, declared_scales(checked))
        with Store.open(db) as store, reading(path):
            stored.append(stream_label_set(store, header, iter_jsonl_records(path, checked)))
    else:
        sets = read_labels(path, format_name, name=name, kind=kind)  # read and checked before the store opens
        digest = hashlib.sha256("".join(sha256_of(file, use_cache=False) for file in files).encode()).hexdigest()
        with Store.open(db) as store:
            stored += [write_label_set(store, label_set, digest) for label_set in sets]
    return stored


@labels_app.command("list")
def labels_list(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Label sets with their items, annotators and criteria (with scales)."""
    from appliance.store.labels import label_set_summaries

    with Store.open(db, read_only=True) as store:
        summaries = label_set_summaries(store)
    if as_json:
        print(json.dumps(summaries, default=str))
        return
    table = Table(title="label sets", title_justify="left")
    for column in ("label set", "kind", "format", "items", "annotators", "labels", "missing", "criteria (scale)"):
        table.add_column(column)
    for s in summaries:
        criteria = ", ".join(f"{c} ({lo:g}-{hi:g})" for c, (lo, hi) in s["criteria"].items())
        table.add_row(
            s["label_set"],
            s["kind"],
            s["format"],
            str(s["items"]),
            str(s["annotators"]),
            str(s["labels"]),
            str(s["missing"]),
            criteria,
        )
    console.print(table)


LabelsOption = Annotated[str, typer.Option("--labels", help="label set (see 'appliance labels list')")]
CriterionOption = Annotated[
    str | None, typer.Option(help="human criterion (default: the set's only one, else Overall / preference)")
]
TemplateOption = Annotated[
    str | None,
    typer.Option(
        help="judge template in judges/ (default by label kind: a likelihood panel's own for turn sets, "
        "dialogue_followups for dialogues, instruction_likelihood for pairs; else turn_rating, "
        "dialogue_rating, pairwise_preference)"
    ),
]
LimitOption = Annotated[int | None, typer.Option(min=4, help="a seeded sample of N items")]
HeldoutOption = Annotated[float, typer.Option(min=0.05, max=0.95, help="share of items held out")]
SeedOption = Annotated[int, typer.Option(help="split, sample and decoding seed")]
ParallelOption = Annotated[int, typer.Option(min=1, help="items rated at once")]
ResamplesOption = Annotated[int, typer.Option(min=100, help="bootstrap resamples per interval")]
CurveOption = Annotated[
    bool,
    typer.Option(
        "--curve",
        help="also refit on 25/50/100/150/all fitting items of 10 seeded splits and report held-out "
        "Spearman per size (ratings read from probabilities)",
    ),
]
PlotOption = Annotated[Path | None, typer.Option(help="PNG path (default out/<calibration id>.png)")]
ShipOption = Annotated[
    bool,
    typer.Option(
        "--ship", help="also write it to judges/calibrations/<panel>/ with its held-out report (runs apply it)"
    ),
]
TransferOption = Annotated[
    str | None,
    typer.Option(
        help="fit nothing: apply this stored or shipped calibration to every item of --labels and report its "
        "zero-shot agreement",
        metavar="CALIBRATION_ID",
    ),
]


def calibrate(
    panel: PanelOption = "default",
    labels: LabelsOption = "fed-turn",
    criterion: CriterionOption = None,
    template: TemplateOption = None,
    limit: LimitOption = None,
    heldout: HeldoutOption = 0.5,
    seed: SeedOption = 0,
    parallel: ParallelOption = 16,
    resamples: ResamplesOption = 1000,
    curve: CurveOption = False,
    plot: PlotOption = None,
    ship: ShipOption = False,
    transfer: TransferOption = None,
    db: DbOption = None,
    models: ModelsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Rate labelled items with a panel, fit judge->human maps on one part, report agreement on the rest."""
    from appliance.calibration.pipeline import CalibrationRequest, run_calibration, run_transfer

    catalog = load_models(models)
    chosen = load_panel(panel, catalog)
    request = CalibrationRequest(
        chosen, labels, criterion, template, limit, heldout, seed, parallel, resamples, curve=curve
    )
    with Store.open(db) as store, _progress("items", as_json) as progress:
        task = progress.add_task("rating", total=None)

        def progressed(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        if transfer is not None:
            found = run_transfer(store, catalog, request, transfer, judges_dir(), on_item=progressed)
        else:
            outcome = run_calibration(store, catalog, request, judges_dir(), on_item=progressed)
    if transfer is not None:
        if as_json:
            print(json.dumps(found))
        else:
            print_transfer(found)
        return
    _show_calibration(outcome, plot, ship=ship, as_json=as_json)


def _show_calibration(outcome: CalibrationOutcome, plot: Path | None, *, ship: bool, as_json: bool) -> None:
    """Write the plot (and the shipped files), then print the held-out report."""
    from appliance.calibration.plot import write_plot

    plot_path = write_plot(
        plot or Path("out") / f"{outcome.record.calibration_id}.png", outcome.held, outcome.kind, outcome.report
    )
    report = outcome.report | {"plot": str(plot_path)}
    if ship:
        from appliance.calibration.shipped import write_shipped

        calibration_file, report_file = write_shipped(judges_dir(), outcome.record, outcome.report)
        report["shipped"] = [str(calibration_file), str(report_file)]
        if not as_json:
            console.print(f"shipped: {calibration_file} and {report_file}")
    if as_json:
        print(json.dumps(report))
    else:
        print_calibration(report)


def print_calibration(report: dict[str, Any]) -> None:
    pairwise = report["kind"] == "pairwise"
    features = "features" in report
    from appliance.calibration.shipped import report_metrics

    names = report_metrics(report["model"].get("kind"))
    table = Table(
        title=(
            f"calibration {report['calibration_id']}: panel '{report['panel']}' on '{report['label_set']}' "
            f"/ {report['criterion']} (template {report['template']}; fit {report['items']['fit']}, "
            f"held out {report['items']['heldout']})"
        ),
        title_justify="left",
    )
    table.add_column("held-out")
    table.add_column("n", justify="right")
    for name in names:
        table.add_column(name, justify="right")
    for label, row in _calibration_rows(report, pairwise=pairwise, features=features):
        cells = [_metric_cell(row.get(name)) for name in names]
        table.add_row(label, str(row.get("n", row.get("annotators", ""))), *cells)
    console.print(table)
    if unmeasured := report["human_ceiling"].get("not_measurable"):
        console.print(f"Human ceiling: {unmeasured}.", markup=False, highlight=False)
    unparsed = ", ".join(f"{j}: {n}" for j, n in report["unparsed_verdicts"].items())
    method = _method_sentence(report, pairwise=pairwise, features=features)
    console.print(
        f"{method} spearman_like_for_like: against the mean of all annotators but one, averaged over the one "
        "left out (how the human ceiling is measured). 95% intervals: bootstrap over held-out items (items "
        f"sharing a context resampled together). Unparsed verdicts: {unparsed}."
    )
    if "curve" in report:
        _print_curve(report["curve"])
    console.print(f"Stored as {report['calibration_id']}; plot: {report['plot']}")


def _calibration_rows(report: dict[str, Any], *, pairwise: bool, features: bool) -> list[tuple[str, dict[str, Any]]]:
    """The held-out table's rows: each judge (and its calibrated map), the panel, the baselines, the features."""
    rows: list[tuple[str, dict[str, Any]]] = []
    for judge, row in report["judges"].items():
        raw = f" ({report['model'].get('summary', 'summary')} alone)" if features else " (raw)"
        rows.append((f"{judge}" + ("" if pairwise else raw), row))
        if "calibrated" in row:
            rows.append((f"{judge} (calibrated)", row["calibrated"]))
    rows += [(key, report[key]) for key in ("panel_mean", "panel_calibrated", "human_ceiling", "length_baseline")]
    if best := report.get("fit_best_feature"):
        rows.append((f"fit-best feature ({best['judge']}: {best['feature']})", best))
    for judge, by_feature in report.get("features", {}).items():
        rows += [(f"{judge}: {name} alone", row) for name, row in by_feature.items()]
    return rows


def _method_sentence(report: dict[str, Any], *, pairwise: bool, features: bool) -> str:
    from appliance.calibration.shipped import combiner_sentence, pair_features_sentence

    if pairwise and features:
        return pair_features_sentence(report["model"])
    if pairwise:
        return (
            "Each pair is judged in both orders: a win needs both, anything else counts as a tie; position bias = "
            "the same slot picked in both orders."
        )
    if features:
        return (
            f"Human scale {report['human_scale']} (from the fitting part). Panel calibrated = "
            f"{combiner_sentence(report['combiner'])} A feature alone = mapped monotonically (direction from the "
            "fitting part); the fit-best feature is the one the fitting part ranks first."
        )
    return (
        f"Human scale {report['human_scale']} (from the fitting part), judge scale {report['judge_scale']}; raw "
        "judges are rescaled linearly for MAE and alpha."
    )


def _print_curve(curve_report: dict[str, Any]) -> None:
    from appliance.calibration.curve import CURVE_HEADERS, curve_cells

    curve = Table(
        title=f"learning curve: held-out Spearman, mean over {curve_report['splits']} seeded splits [95% interval]",
        title_justify="left",
    )
    for header in CURVE_HEADERS:
        curve.add_column(header, justify="left" if header == "chosen" else "right")
    for point in curve_cells(curve_report):
        curve.add_row(*point)
    console.print(curve)


def print_transfer(report: dict[str, Any]) -> None:
    source = report["fitted_on"]
    table = Table(
        title=(
            f"calibration {report['calibration_id']} (fitted on '{source['label_set']}' / {source['criterion']}) "
            f"applied unrefitted to '{report['label_set']}' / {report['criterion']} ({report['items']} items, "
            f"template {report['template']})"
        ),
        title_justify="left",
    )
    names = ("spearman", "spearman_like_for_like", "kendall", "pearson")
    table.add_column("zero-shot")
    table.add_column("n", justify="right")
    for name in names:
        table.add_column(name, justify="right")
    for key in ("panel_transferred", "panel_mean", "human_ceiling"):
        row = report[key]
        count = str(row.get("n", row.get("annotators", "")))
        table.add_row(key, count, *(_metric_cell(row.get(name)) for name in names))
    console.print(table)
    console.print(
        f"On its own labels it held out {_metric_cell(source['heldout_spearman'])} (Spearman). panel_mean: the "
        "judges' summary scores standardised on these items (no label used). 95% intervals: bootstrap over items."
    )


def _metric_cell(metric: dict[str, Any] | None) -> str:
    if not metric or metric.get("value") is None:
        return "-"
    ci = metric.get("ci")
    interval = "" if not ci else f" [{ci[0]:.2f}, {ci[1]:.2f}]"
    return f"{metric['value']:.2f}{interval}"


def score(
    run_id: Annotated[str | None, typer.Argument(help="run id (default: the latest run)")] = None,
    panel: PanelOption = "default",
    parallel: Annotated[int, typer.Option(min=1, help="episodes judged at once")] = 8,
    db: DbOption = None,
    models: ModelsOption = None,
    as_json: JsonOption = False,
) -> None:
    """(Re)score a stored run with a panel, without regenerating transcripts; other panels' scores stay."""
    from appliance.run.rescoring import rescore_run
    from appliance.scenarios import build_scenario_report

    catalog = load_models(models)
    chosen = load_panel(panel, catalog)
    with Store.open(db) as store, _progress("episodes", as_json) as progress:
        resolved = store.resolve_run_id(run_id)
        task = progress.add_task("judging", total=None)
        summary = rescore_run(
            store,
            catalog,
            resolved,
            chosen,
            parallel=parallel,
            on_episode=lambda done, total: progress.update(task, completed=done, total=total),
        )
        scenarios = store.run(resolved).scenarios
        boards = [build_scenario_report(store, resolved, name, chosen.name) for name in scenarios]
    if as_json:
        print(json.dumps({"summary": asdict(summary), "leaderboards": [b.model_dump() for b in boards]}, default=str))
        report_store_check(summary.store_check)
        return
    for board in boards:
        board.render(console)
    console.print(f"Scored {summary.episodes} episodes of run {summary.run_id} with panel '{summary.panel}'.")
    report_store_check(summary.store_check)
