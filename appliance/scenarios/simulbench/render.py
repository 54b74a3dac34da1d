"""The SimulBench rating and pairwise tables on a terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from appliance.scenarios.simulbench.report import Cell, SimulBenchReport
from appliance.util.terminal import interval as _interval
from appliance.util.terminal import number as _number


def _cell(cell: Cell) -> str:
    if cell.mean is None:
        return "-"
    return f"{cell.mean:.2f} {_interval(cell.ci)} n={cell.n}"


def print_simulbench_report(console: Console, report: SimulBenchReport) -> None:
    ratings = Table(
        title=f"{report.scenario}: 1-10 ratings by panel '{report.panel}', run {report.run_id} ({report.status})",
        title_justify="left",
    )
    for column in ("target", "all scripts", "hard subset", "unrated", "not fitting", "cut"):
        ratings.add_column(column, justify="left" if column == "target" else "right")
    for row in report.rows:
        counts = (row.unrated, row.not_fitting, row.cut_replies)
        ratings.add_row(row.player, _cell(row.all), _cell(row.hard), *(str(count) for count in counts))
    console.print(ratings)
    console.print(
        f"Compared on {report.common_scripts} scripts rated for every model; {report.perfect_dropped} perfect "
        f"scripts dropped as in the paper (perfect for every model that decided them: {report.perfect_decided_by}); "
        f"{report.incomplete_scripts} scripts left out because some model has no rating."
    )
    breakdown = Table(title="breakdowns (mean [95% CI] n; task type on FirstChan scripts)", title_justify="left")
    for column in ("target", "by", "group", "rating"):
        breakdown.add_column(column, justify="left" if column != "rating" else "right")
    for row in report.rows:
        for by, groups in (("task type", row.by_task_type), ("script", row.by_kind), ("turn", row.by_turn)):
            for group, cell in groups.items():
                breakdown.add_row(row.player, by, group, _cell(cell))
    console.print(breakdown)
    if report.hardest_tasks:
        console.print(_tasks_table(report))
    if report.pairs:
        console.print(_pairs_table(report))
    if report.collection is not None:
        c = report.collection
        strategies = ", ".join(f"{name} {count}" for name, count in sorted(c.strategies.items())) or "none"
        scripts = ", ".join(f"{kind} {count}" for kind, count in c.scripts.items())
        console.print(
            f"collected {c.dialogues} dialogues (simulator {c.simulator}, user agent {c.user_agent}), "
            f"{_number(c.mean_turns)} turns on average; user agent strategies: {strategies}; "
            f"{c.agent_rejections} user agent replies rejected; {c.cut_simulator_replies} simulator replies cut by "
            f"the token cap. Scripts: {scripts}."
        )
    console.print(
        "Hard subset = FirstChan + SubseqChan scripts. not fitting = scripts longer than the model's context "
        "(not evaluated, never truncated). cut = replies stopped by the token cap. "
        "Intervals: bootstrap over tasks (a task's scripts are drawn together)."
    )


def _tasks_table(report: SimulBenchReport) -> Table:
    title = "hardest and simplest tasks of each type (mean rating over every model; the paper's Table 2)"
    tasks = Table(title=title, title_justify="left")
    for column in ("end", "task", "type", "scripts", "mean", "per model"):
        tasks.add_column(column, justify="right" if column in ("scripts", "mean") else "left")
    for end, rows in (("hardest", report.hardest_tasks), ("simplest", report.simplest_tasks)):
        for task in rows:
            per_model = ", ".join(f"{p} {_number(v)}" for p, v in task.by_player.items())
            tasks.add_row(end, task.task, task.task_type, str(task.scripts), _number(task.mean), per_model)
    return tasks


def _pairs_table(report: SimulBenchReport) -> Table:
    decided = report.pairs_decided_by or "sampled verdicts in both orders; a win needs both"
    pairs = Table(title=f"pairwise (decided by {decided})", title_justify="left")
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
    return pairs
