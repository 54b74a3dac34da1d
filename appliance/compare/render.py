"""A comparison as a terminal table or as Markdown for a CI comment."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from appliance.compare.gate import IMPROVEMENT, Comparison, MetricComparison
from appliance.compare.sweep import SweepCurve, SweepResult
from appliance.util.terminal import interval, number


def _verdict(row: MetricComparison) -> str:
    return "REGRESSION" if row.regression else row.verdict


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def print_comparison(console: Console, comparison: Comparison) -> None:
    table = Table(
        title=f"compare: base {comparison.base_run} -> candidate {comparison.candidate_run}", title_justify="left"
    )
    level = f"{1 - comparison.alpha:.0%} CI"
    for column in (
        "metric",
        "players",
        "base",
        "candidate",
        "delta",
        level,
        "p (Holm)",
        "max drop",
        "pairs",
        "verdict",
    ):
        table.add_column(column, justify="left" if column in ("metric", "players", "verdict") else "right")
    for row in comparison.metrics:
        table.add_row(
            f"{row.family}.{row.metric}" + ("" if row.higher_is_better else " (lower is better)"),
            row.base_player
            if row.base_player == row.candidate_player
            else f"{row.base_player} -> {row.candidate_player}",
            number(row.base),
            number(row.candidate),
            number(row.delta),
            interval(row.ci),
            _p(row.p_regression_holm),
            number(row.max_drop),
            str(row.pairs),
            _verdict(row),
        )
    console.print(table)
    if comparison.differences:
        console.print(f"Compared with --force although the runs differ: {'; '.join(comparison.differences)}.")
    for line in comparison.blind:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    regressions = comparison.regressions
    console.print(
        f"{len(regressions)} regression(s): {', '.join(f'{r.family}.{r.metric}' for r in regressions)}."
        if regressions
        else f"No regression at a family-wise alpha of {comparison.alpha:g} "
        f"(Holm, across {len(comparison.metrics)} metrics)."
    )


def comparison_markdown(comparison: Comparison) -> str:
    lines = [
        f"### appliance compare: `{comparison.base_run}` -> `{comparison.candidate_run}`",
        "",
        f"| metric | players | base | candidate | delta | {1 - comparison.alpha:.0%} CI | p (Holm) | max drop "
        "| verdict |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in comparison.metrics:
        players = (
            row.base_player
            if row.base_player == row.candidate_player
            else f"{row.base_player} → {row.candidate_player}"
        )
        lines.append(
            f"| {row.family}.{row.metric} | {players} | {number(row.base)} | {number(row.candidate)} | "
            f"{number(row.delta)} | {interval(row.ci)} | {_p(row.p_regression_holm)} | {number(row.max_drop)} | "
            f"{'**REGRESSION**' if row.regression else _verdict(row)} |"
        )
    if comparison.differences:
        lines += ["", f"Forced although the runs differ: {'; '.join(comparison.differences)}."]
    lines += ["", *comparison.blind] if comparison.blind else []
    count = len(comparison.regressions)
    lines += ["", f"**{count} regression(s).**" if count else "No regression."]
    return "\n".join(lines)


def sweep_rows(curve: SweepCurve) -> list[list[str]]:
    """The base, then each checkpoint in step order: value, interval, n, difference to the base, verdict."""
    best = curve.best
    rows = [[f"{curve.base.label} (base)", "-", number(curve.base.value), interval(curve.base.ci), str(curve.base.n),
             "", "", "", ""]]  # fmt: skip
    for point in curve.points:
        against = point.against_base
        rows.append(
            [
                point.player + (" (best)" if best is not None and point.player == best.player else ""),
                str(point.step),
                number(point.estimate.value),
                interval(point.estimate.ci),
                str(point.estimate.n),
                number(against.delta),
                interval(against.ci),
                _p(against.p_improvement_holm if against.verdict == IMPROVEMENT else against.p_regression_holm),
                _verdict(against),
            ]
        )
    return rows


SWEEP_COLUMNS = ("player", "step", "value", "95% CI", "n", "minus base", "CI of difference", "p (Holm)", "verdict")


def _sweep_title(result: SweepResult, curve: SweepCurve) -> str:
    direction = "higher is better" if curve.higher_is_better else "lower is better"
    return f"sweep {result.sweep.name}: {curve.family}.{curve.metric} ({direction})"


def sweep_summary(result: SweepResult) -> list[str]:
    """What the sweep says: the best checkpoint per metric, which beat the base, and the gate's verdict."""
    comparison = result.comparison
    tests = f"Holm across {len(result.sweep.checkpoints)} checkpoints and {len(result.curves)} metrics"
    runs = (
        f"run {comparison.candidate_run}"
        if comparison.base_run == comparison.candidate_run
        else f"base run {comparison.base_run}, candidate run {comparison.candidate_run}"
    )
    lines = [f"Sweep {result.sweep.name} against its base {result.sweep.base} ({runs}; paired over shared units)."]
    for curve in result.curves:
        best = curve.best
        if best is not None:
            lines.append(
                f"Best on {curve.family}.{curve.metric}: {best.player} (step {best.step}), "
                f"{number(best.estimate.value)}."
            )
    better = result.better
    lines.append(
        f"Better than the base at a family-wise error rate of {comparison.alpha:g} ({tests}): "
        + ("; ".join(f"{player} ({', '.join(metrics)})" for player, metrics in better.items()) if better else "none")
        + "."
    )
    regressed = result.gate_regressions
    lines.append(
        f"Gate on {result.gated}: "
        + (
            f"REGRESSION in {', '.join(f'{m.family}.{m.metric}' for m in regressed)}."
            if regressed
            else "no regression."
        )
    )
    return lines


def print_sweep(console: Console, result: SweepResult) -> None:
    for curve in result.curves:
        table = Table(title=_sweep_title(result, curve), title_justify="left")
        for column in SWEEP_COLUMNS:
            table.add_column(column, justify="left" if column in ("player", "verdict") else "right")
        for row in sweep_rows(curve):
            table.add_row(*row)
        console.print(table)
    if result.comparison.differences:
        console.print(f"Compared with --force although the runs differ: {'; '.join(result.comparison.differences)}.")
    for line in sweep_summary(result):
        console.print(line, markup=False, highlight=False)


def sweep_markdown(result: SweepResult) -> str:
    lines = [f"### appliance compare --sweep {result.sweep.name}"]
    for curve in result.curves:
        lines += ["", f"**{_sweep_title(result, curve)}**", "", "| " + " | ".join(SWEEP_COLUMNS) + " |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
        lines += ["| " + " | ".join(row) + " |" for row in sweep_rows(curve)]
    lines += ["", *sweep_summary(result)]
    return "\n".join(lines)
