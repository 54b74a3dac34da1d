"""The DeepEval tables on a terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from appliance.scenarios.deepeval.report import DeepEvalReport, PayoffRow
from appliance.util.terminal import interval as _interval
from appliance.util.terminal import number as _number


def _table(title: str, columns: list[str], left: int = 1) -> Table:
    """A table whose first `left` columns are text, the rest numbers."""
    table = Table(title=title, title_justify="left")
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index < left else "right")
    return table


def _payoff_table(title: str, rows: list[PayoffRow], with_role: bool) -> Table:
    columns = [
        "task",
        "model",
        *(["role"] if with_role else []),
        "payoff",
        "95% CI",
        "min-max",
        "n",
        "±",
        "stable",
        "also",
    ]
    table = _table(title, columns, left=3 if with_role else 2)
    for row in rows:
        extras = ", ".join(f"{name} {_number(value)}" for name, value in row.extras.items())
        cell = row.payoff
        table.add_row(
            row.title,
            row.model,
            *([row.role] if with_role else []),
            _number(cell.mean),
            _interval(cell.ci),
            _interval((cell.spread[0], cell.spread[-1]) if cell.spread else None),
            str(cell.n),
            f"{_number(cell.half_width)} of {_number(cell.limit)}",
            "yes" if cell.stable else "no",
            extras,
        )
    return table


def print_deepeval_report(console: Console, report: DeepEvalReport) -> None:
    heading = f"{report.scenario}, run {report.run_id} ({report.status}), panel '{report.panel}'"
    console.print(_payoff_table(f"{heading}: symmetric tasks, payoff per model", report.symmetric, False))
    console.print(_payoff_table("asymmetric tasks, payoff per model and role", report.asymmetric, True))
    _print_repetitions(console, report)
    _print_chains(console, report)
    _print_role_matrices(console, report)
    _print_translation_pairs(console, report)
    _print_notes(console, report)


def _print_repetitions(console: Console, report: DeepEvalReport) -> None:
    table = _table("repetitions until stable", ["task", "rule", "repetitions", "episodes", "failed", "stable"], 2)
    for task in report.repetitions:
        stable = "yes" if task.stable else "no"
        table.add_row(task.task, task.rule, str(task.repetitions), str(task.episodes), str(task.failed), stable)
    console.print(table)


def _print_rows(console: Console, title: str, columns: list[str], left: int, rows: list[list[str]]) -> None:
    """A table of already formatted rows; nothing when there are none."""
    if not rows:
        return
    table = _table(title, columns, left)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _print_chains(console: Console, report: DeepEvalReport) -> None:
    rows = [
        [r.task, r.early, r.late, str(r.games), *map(_number, (r.early_win, r.late_win, r.early_hits, r.late_hits))]
        for r in report.chain_positions
    ]
    columns = ["task", "early", "late", "games", "win early", "win late", "hits early", "hits late"]
    _print_rows(console, "chains by position (the paper's Tables 1-2): early moved first", columns, 3, rows)
    marginals = [
        [m.task, m.model, *map(_number, (m.early_win, m.late_win, m.early_hits, m.late_hits))]
        for m in report.chain_marginals
    ]
    _print_rows(
        console,
        "chain marginals: a model's mean over its opponents when early (s̄_E) and when late (s̄_L)",
        ["task", "model", "win s̄_E", "win s̄_L", "hits s̄_E", "hits s̄_L"],
        2,
        marginals,
    )


def _print_role_matrices(console: Console, report: DeepEvalReport) -> None:
    rows = [
        [
            cell.task,
            f"{cell.roles[0]}: {cell.models[0]}",
            f"{cell.roles[1]}: {cell.models[1]}",
            str(cell.n),
            *(_number(cell.payoffs.get(role)) for role in cell.roles),
        ]
        for cell in report.role_matrices
    ]
    columns = ["task", "role A: model", "role B: model", "n", "A", "B"]
    _print_rows(console, "opponent x role: each role's mean payoff", columns, 3, rows)


def _print_translation_pairs(console: Console, report: DeepEvalReport) -> None:
    rows = [[r.pair, r.model, r.role, _number(r.mean), _interval(r.ci), str(r.n)] for r in report.translation_pairs]
    columns = ["pair", "model", "role", "mean", "95% CI", "n"]
    _print_rows(console, "translation per language pair (panel rating 1-10)", columns, 3, rows)


def _print_notes(console: Console, report: DeepEvalReport) -> None:
    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    if report.public_goods_seating:
        say(f"Public goods: {report.public_goods_seating}.")
    if report.self_judging and report.excluded_self_judging:
        say(
            f"{', '.join(report.self_judging)} both play and judge; with --exclude-self-judging no judge rated "
            "its own outputs (the other judges scored them)."
        )
    elif report.self_judging:
        say(
            f"warning: {', '.join(report.self_judging)} both play and judge in this run, so the ratings include "
            "judges rating their own outputs (self-judging); --exclude-self-judging or a panel without the "
            "players avoids it."
        )
    if report.unsafe_code_execution:
        say(
            "warning: model-written code ran WITHOUT kernel isolation (--unsafe-code-execution): only the child's "
            "own seccomp filter, limits and audit hook guarded this machine."
        )
    if report.unparsed_ratings:
        say(f"{report.unparsed_ratings} ratings of the panel did not parse and are left out of the means.")
    if report.settings_source == "files":
        say("This run did not store its settings: the rules above are read from the files as they are now.")
    say(
        "Payoffs: coins owned at the end (public goods), 1 win / 0.5 draw / 0 loss (chains), the panel's 1-10 "
        "rating (programmer, reviewer, translator, proofreader; the share of tests passed is shown beside)."
        " Stable: the "
        f"{report.confidence:.0%} interval's half-width (±) is at most {report.tolerance:g} x the payoff's range "
        "(a Wilson interval for outcomes in 0..1, a bootstrap interval for amounts)."
    )
