"""Plotly figures of the page, built in Python and embedded as JSON (the page draws them offline)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from appliance.compare.gate import IMPROVEMENT, REGRESSION
from appliance.compare.sweep import SweepCurve
from appliance.headline import Estimate
from appliance.view.contents import MetricBoard, MetricDeltas

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


#: a sweep point's colour by its verdict against the base
VERDICT_COLOURS = {IMPROVEMENT: GOOD, REGRESSION: BAD}
CHECKPOINTS, BASE_BAND = "#3465a4", "rgba(136, 136, 136, 0.18)"


def _band(name: str, xs: list[float], lows: list[float | None], highs: list[float | None], fill: str) -> list[Any]:
    """An interval drawn as a shaded band: its lower edge, then its upper edge filled down to it."""
    edge = {"width": 0}
    return [
        go.Scatter(x=xs, y=lows, mode="lines", line=edge, showlegend=False, hoverinfo="skip"),
        go.Scatter(x=xs, y=highs, mode="lines", line=edge, fill="tonexty", fillcolor=fill, name=name, hoverinfo="skip"),
    ]


def sweep_figure(sweep: str, base: str, curve: SweepCurve) -> Figure:
    """The metric against the training step: the checkpoints' line with their 95% intervals as a band,
    the base as a horizontal line and band. A point's customdata is its player: clicking it opens the
    checkpoint's transcripts."""
    points = curve.points
    steps = [float(point.step) for point in points]
    span = [min(steps), max(steps)] if steps else [0.0, 1.0]
    low, high = curve.base.ci if curve.base.ci is not None else (curve.base.value, curve.base.value)
    traces = _band(f"{base} (base), 95% interval", span, [low, low], [high, high], BASE_BAND)
    traces.append(
        go.Scatter(
            x=span,
            y=[curve.base.value] * 2,
            mode="lines",
            line={"color": NEUTRAL, "dash": "dash"},
            name=f"{base} (base)",
            hoverinfo="skip",
        )
    )
    cis = [point.estimate.ci for point in points]
    lows = [None if ci is None else ci[0] for ci in cis]
    highs = [None if ci is None else ci[1] for ci in cis]
    traces += _band("checkpoints, 95% interval", steps, lows, highs, "rgba(52, 101, 164, 0.18)")
    traces.append(
        go.Scatter(
            x=steps,
            y=[point.estimate.value for point in points],
            mode="lines+markers",
            line={"color": CHECKPOINTS},
            marker={"size": 11, "color": [VERDICT_COLOURS.get(p.against_base.verdict, CHECKPOINTS) for p in points]},
            name=sweep,
            customdata=[point.player for point in points],
            text=[p.against_base.verdict for p in points],
            hovertemplate="%{customdata} (step %{x}): %{y:.3f}, %{text} against the base; click for its transcripts"
            "<extra></extra>",
        )
    )
    direction = "higher is better" if curve.higher_is_better else "lower is better"
    title = f"{sweep}: {curve.family}.{curve.metric} by training step ({direction})"
    layout = _layout(
        title,
        curve.metric,
        xaxis={"title": {"text": "training step"}},
        legend={"orientation": "h", "y": -0.3},
        margin={"l": 60, "r": 20, "t": 40, "b": 110},
    )
    return _as_json(go.Figure(traces, layout=layout))
