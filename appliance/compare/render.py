"""A comparison as a terminal table or as Markdown for a CI comment."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from appliance.compare.gate import Comparison, MetricComparison
from appliance.terminal import interval, number


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
    count = len(comparison.regressions)
    lines += ["", f"**{count} regression(s).**" if count else "No regression."]
    return "\n".join(lines)
