"""One self-contained HTML file: the page's script, style, Plotly's offline bundle and the data, inline.

Nothing is fetched when the page opens (no CDN, no network); model output reaches the page only
as JSON data that the script puts into text nodes, never as markup.
"""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from plotly.offline import get_plotlyjs

from appliance.compare.render import SWEEP_COLUMNS, sweep_rows, sweep_summary
from appliance.compare.sweep import SweepResult
from appliance.view.contents import ViewContents
from appliance.view.figures import breakdown_figure, calibration_figures, deltas_figure, metric_figures, sweep_figure


def page_data(contents: ViewContents, title: str) -> dict[str, Any]:
    """Everything the script needs: tables, figures (Plotly JSON), transcripts and label criteria."""
    boards = []
    for board in contents.boards:
        figures = [figure for metric in board.metrics for figure in metric_figures(board.scenario, metric)]
        if board.scores:
            figures.append(breakdown_figure(f"{board.scenario}: stored scores per episode", board.scores, "mean"))
        boards.append(
            {
                "run_id": board.run_id,
                "scenario": board.scenario,
                "metrics": [dataclasses.asdict(metric) for metric in board.metrics],
                "figures": figures,
                "report_text": board.report_text,
            }
        )
    comparison = None
    if contents.comparison is not None:
        comparison = {
            "base_run": contents.comparison.base_run,
            "candidate_run": contents.comparison.candidate_run,
            "summary": contents.comparison.summary,
            "figures": [deltas_figure(deltas) for deltas in contents.comparison.per_instance if deltas.deltas],
        }
    return {
        "title": title,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "runs": contents.runs,
        "boards": boards,
        "comparison": comparison,
        "comparison_note": contents.comparison_note,
        "calibrations": [
            {key: calibration[key] for key in ("calibration_id", "label_set", "criterion", "template", "used_by")}
            | {"figures": calibration_figures(calibration)}
            for calibration in contents.calibrations
        ],
        "sweeps": [_sweep_data(sweep) for sweep in contents.sweeps],
        "sweep_notes": contents.sweep_notes,
        "transcripts": [dataclasses.asdict(transcript) for transcript in contents.transcripts],
        "transcripts_total": contents.transcripts_total,
    }


def _sweep_data(result: SweepResult) -> dict[str, Any]:
    """A sweep's curves (figure and table per headline metric) and what it says, as the report prints it."""
    return {
        "name": result.sweep.name,
        "base": result.sweep.base,
        "run_id": result.comparison.candidate_run,
        "columns": list(SWEEP_COLUMNS),
        "curves": [
            {
                "metric": f"{curve.family}.{curve.metric}",
                "rows": sweep_rows(curve),
                "figure": sweep_figure(result.sweep.name, result.sweep.base, curve),
            }
            for curve in result.curves
        ],
        "summary": sweep_summary(result),
    }


def _static(name: str) -> str:
    return resources.files("appliance.view").joinpath("static", name).read_text(encoding="utf-8")


def _finite(value: Any) -> Any:
    """NaN and infinities as null: JSON has no such numbers and the page treats them as missing."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def _script_json(data: dict[str, Any]) -> str:
    """JSON safe inside a <script> element: no '</' can close it early."""
    return json.dumps(_finite(data), default=str, allow_nan=False).replace("</", "<\\/")


def render_page(contents: ViewContents, title: str) -> str:
    data = _script_json(page_data(contents, title))
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_escape(title)}</title>",
            f"<style>{_static('page.css')}</style>",
            f"<script>{get_plotlyjs()}</script>",
            "</head><body>",
            '<div id="app"></div>',
            f'<script id="view-data" type="application/json">{data}</script>',
            f"<script>{_static('page.js')}</script>",
            "</body></html>",
        ]
    )


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
