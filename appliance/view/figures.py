"""Plotly figures of the page, built in Python and embedded as JSON (the page draws them offline)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from appliance.view.contents import Estimate, MetricBoard, MetricDeltas

Figure = dict[str, Any]
GOOD, BAD, NEUTRAL = "#2a7f62", "#b3342d", "#888888"


def _layout(title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    return {
        "template": "none",
        "title": {"text": title, "font": {"size": 14}},
        "yaxis": {"title": {"text": y_title}, "gridcolor": "#e5e5e5", "zeroline": False},
        "margin": {"l": 60, "r": 20, "t": 40, "b": 90},
        "height": 320,
        **extra,
    }


def _as_json(figure: go.Figure) -> Figure:
    result: Figure = json.loads(figure.to_json())
    return result


def _errors(estimates: Sequence[Estimate]) -> dict[str, Any]:
    """Asymmetric error bars from the intervals (none where an estimate has no interval)."""
    plus = [None if e.ci is None or e.value is None else e.ci[1] - e.value for e in estimates]
    minus = [None if e.ci is None or e.value is None else e.value - e.ci[0] for e in estimates]
    return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus, "thickness": 1.5}


def interval_figure(title: str, estimates: Sequence[Estimate], y_title: str) -> Figure:
    """One point per player with its 95% interval."""
    figure = go.Figure(
        go.Scatter(
            x=[e.label for e in estimates],
            y=[e.value for e in estimates],
            mode="markers",
            marker={"size": 10},
            error_y=_errors(estimates),
            customdata=[e.n for e in estimates],
            hovertemplate="%{x}: %{y:.3f} (n=%{customdata})<extra></extra>",
        ),
        layout=_layout(title, y_title, xaxis={"type": "category"}),
    )
    return _as_json(figure)


def breakdown_figure(title: str, series: dict[str, list[Estimate]], y_title: str) -> Figure:
    """Groups along x (criteria, games); one trace per player, each point with its interval."""
    players = sorted({e.label for estimates in series.values() for e in estimates})
    traces = []
    for player in players:
        points = [(group, e) for group, estimates in series.items() for e in estimates if e.label == player]
        traces.append(
            go.Scatter(
                name=player,
                x=[group for group, _ in points],
                y=[e.value for _, e in points],
                mode="markers",
                marker={"size": 9},
                error_y=_errors([e for _, e in points]),
            )
        )
    layout = _layout(title, y_title, scattermode="group", legend={"orientation": "h"}, xaxis={"type": "category"})
    figure = go.Figure(traces, layout=layout)
    return _as_json(figure)


def metric_figures(scenario: str, board: MetricBoard) -> list[Figure]:
    direction = "higher is better" if board.higher_is_better else "lower is better"
    figures = [interval_figure(f"{scenario}: {board.metric} ({direction})", board.rows, board.metric)]
    if board.groups:
        figures.append(breakdown_figure(f"{scenario}: {board.metric} per group", board.groups, board.metric))
    return figures


def deltas_figure(deltas: MetricDeltas) -> Figure:
    """Candidate minus base per instance, worst first; red where the candidate is worse."""
    sign = 1.0 if deltas.higher_is_better else -1.0
    gains = sorted(
        ((d.delta * sign, d) for d in deltas.deltas if d.delta is not None), key=lambda pair: pair[0]
    )  # worst first
    known = [d for _, d in gains]
    colours = [GOOD if gain > 0 else BAD if gain < 0 else NEUTRAL for gain, _ in gains]
    title = (
        f"{deltas.family}.{deltas.metric}: {deltas.candidate_player} minus {deltas.base_player}, per instance "
        f"({len(known)} paired)"
    )
    figure = go.Figure(
        go.Bar(
            x=[d.key for d in known],
            y=[d.delta for d in known],
            marker={"color": colours},
            customdata=[[d.base, d.candidate] for d in known],
            hovertemplate="%{x}: %{y:+.3f} (base %{customdata[0]:.3f}, candidate %{customdata[1]:.3f})<extra></extra>",
        ),
        layout=_layout(title, "difference", xaxis={"type": "category", "showticklabels": len(known) <= 40}),
    )
    return _as_json(figure)


def calibration_figures(calibration: dict[str, Any]) -> list[Figure]:
    """Held-out agreement of every predictor with its interval; for ratings, each judge's fitted map."""
    metrics = calibration["metrics"]
    pairwise = calibration["model"].get("kind") == "pairwise"
    name = "kappa" if pairwise else "spearman"
    rows: list[tuple[str, dict[str, Any]]] = [(judge, row) for judge, row in metrics.get("judges", {}).items()]
    rows += [
        (key, metrics[key])
        for key in ("panel_mean", "panel_calibrated", "length_baseline", "human_ceiling")
        if key in metrics
    ]
    if best := metrics.get("fit_best_feature"):
        rows.append((f"fit-best feature ({best['judge']}: {best['feature']})", best))
    estimates = [
        Estimate(
            label,
            (row.get(name) or {}).get("value"),
            _interval((row.get(name) or {}).get("ci")),
            int(row.get("n", 0) or 0),
        )
        for label, row in rows
    ]
    title = (
        f"{calibration['calibration_id']}: held-out {name} on {calibration['label_set']} / {calibration['criterion']}"
    )
    figures = [interval_figure(title, estimates, name)]
    maps = calibration["model"].get("maps", {})
    if maps:
        figure = go.Figure(
            [go.Scatter(name=judge, x=m["xs"], y=m["ys"], mode="lines+markers") for judge, m in maps.items()],
            layout=_layout(
                f"{calibration['calibration_id']}: judge score to human scale (fitted on the fitting part)",
                "human scale",
                xaxis={"title": {"text": "judge score"}},
            ),
        )
        figures.append(_as_json(figure))
    if "curve" in metrics:
        figures.append(curve_figure(calibration["calibration_id"], metrics["curve"]))
    return figures


#: the learning curve's rows, as the page names them
CURVE_LINES = {
    "panel_calibrated": "panel calibrated",
    "fit_best_feature": "fit-best feature",
    "panel_mean": "panel mean",
    "ridge": "ridge alone",
}


def curve_figure(calibration_id: str, curve: dict[str, Any]) -> Figure:
    """Held-out Spearman against the number of fitted items, one line per row, with the intervals of
    the means over the seeded splits."""
    points = sorted(curve["points"], key=lambda point: point["fit_items"])
    traces = []
    for row, name in CURVE_LINES.items():
        summaries = [point["rows"][row] for point in points]
        estimates = [Estimate(name, s["mean"], _interval(s["ci"]), s["splits"]) for s in summaries]
        traces.append(
            go.Scatter(
                name=name,
                x=[point["fit_items"] for point in points],
                y=[s["mean"] for s in summaries],
                mode="lines+markers",
                error_y=_errors(estimates),
            )
        )
    title = f"{calibration_id}: held-out Spearman by fitted items ({curve['splits']} seeded splits)"
    return _as_json(go.Figure(traces, layout=_layout(title, "spearman", xaxis={"title": {"text": "fitted items"}})))


def _interval(ci: Any) -> tuple[float, float] | None:
    return None if not ci else (float(ci[0]), float(ci[1]))
