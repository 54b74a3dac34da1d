"""The DeepEval payoff tables on a terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from appliance.scenarios.deepeval.report import DeepEvalReport, PayoffRow
from appliance.terminal import interval as _interval
from appliance.terminal import number as _number


def _payoff_table(title: str, rows: list[PayoffRow], with_role: bool) -> Table:
    table = Table(title=title, title_justify="left")
    columns = ["task", "model", *(["role"] if with_role else []), "payoff", "95% CI", "n", "stable", "also"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("task", "model", "role", "also") else "right")
    for row in rows:
        extras = ", ".join(f"{name} {_number(value)}" for name, value in row.extras.items())
        cell = row.payoff
        table.add_row(
            row.title,
            row.model,
            *([row.role] if with_role else []),
            _number(cell.mean),
            _interval(cell.ci),
            str(cell.n),
            "yes" if cell.stable else "no",
            extras,
        )
    return table


def print_deepeval_report(console: Console, report: DeepEvalReport) -> None:
    heading = f"{report.scenario}, run {report.run_id} ({report.status}), panel '{report.panel}'"
    console.print(_payoff_table(f"{heading}: symmetric tasks, payoff per model", report.symmetric, False))
    console.print(_payoff_table("asymmetric tasks, payoff per model and role", report.asymmetric, True))
    repetitions = Table(title="repetitions until stable", title_justify="left")
    for column in ("task", "repetitions", "episodes", "failed", "stable"):
        repetitions.add_column(column, justify="left" if column == "task" else "right")
    for task in report.repetitions:
        stable = "yes" if task.stable else "no"
        repetitions.add_row(task.task, str(task.repetitions), str(task.episodes), str(task.failed), stable)
    console.print(repetitions)
    if report.self_judging:
        console.print(
            f"warning: {', '.join(report.self_judging)} both play and judge in this run, so the ratings include "
            "judges rating their own outputs (self-judging); a panel without the players avoids it.",
            markup=False,
        )
    if report.unparsed_ratings:
        console.print(f"{report.unparsed_ratings} ratings of the panel did not parse and are left out of the means.")
    console.print(
        "Payoffs: coins owned at the end (public goods), 1 win / 0.5 draw / 0 loss (chains), share of tests "
        "passed (programmer), the panel's 1-10 rating (reviewer, translator, proofreader). Stable: the "
        f"{report.confidence:.0%} bootstrap interval's half-width is at most {report.tolerance:g} x the payoff range."
    )
