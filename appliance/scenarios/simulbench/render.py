"""The SimulBench rating and pairwise tables on a terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from appliance.scenarios.simulbench.report import Cell, SimulBenchReport
from appliance.terminal import interval as _interval
from appliance.terminal import number as _number


def _cell(cell: Cell) -> str:
    if cell.mean is None:
        return "-"
    return f"{cell.mean:.2f} {_interval(cell.ci)} n={cell.n}"


def print_simulbench_report(console: Console, report: SimulBenchReport) -> None:
    ratings = Table(
        title=f"{report.scenario}: 1-10 ratings by panel '{report.panel}', run {report.run_id} ({report.status})",
        title_justify="left",
    )
    for column in ("target", "all scripts", "hard subset", "unrated"):
        ratings.add_column(column, justify="left" if column == "target" else "right")
    for row in report.rows:
        ratings.add_row(row.player, _cell(row.all), _cell(row.hard), str(row.unrated))
    console.print(ratings)
    breakdown = Table(title="breakdowns (mean [95% CI] n)", title_justify="left")
    for column in ("target", "by", "group", "rating"):
        breakdown.add_column(column, justify="left" if column != "rating" else "right")
    for row in report.rows:
        for by, groups in (("task type", row.by_task_type), ("script", row.by_kind), ("turn", row.by_turn)):
            for group, cell in groups.items():
                breakdown.add_row(row.player, by, group, _cell(cell))
    console.print(breakdown)
    if report.pairs:
        pairs = Table(title="pairwise (both orders; a win needs both)", title_justify="left")
        for column in ("first", "second", "subset", "compared", "win %", "tie %", "lose %", "delta", "undecided"):
            pairs.add_column(column, justify="left" if column in ("first", "second", "subset") else "right")
        for pair in report.pairs:
            pairs.add_row(
                pair.first,
                pair.second,
                pair.subset,
                str(pair.compared),
                _number(pair.win),
                _number(pair.tie),
                _number(pair.lose),
                _number(pair.delta),
                str(pair.undecided),
            )
        console.print(pairs)
    if report.collection is not None:
        c = report.collection
        strategies = ", ".join(f"{name} {count}" for name, count in sorted(c.strategies.items())) or "none"
        scripts = ", ".join(f"{kind} {count}" for kind, count in c.scripts.items())
        console.print(
            f"collected {c.dialogues} dialogues, {_number(c.mean_turns)} turns on average; user agent strategies: "
            f"{strategies}; {c.agent_rejections} user agent replies rejected. Scripts: {scripts}."
        )
    console.print("Hard subset = FirstChan + SubseqChan scripts. Intervals: bootstrap over scripts.")
