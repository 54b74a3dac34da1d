"""Terminal rendering of reports (rich tables)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from appliance.report import (
    ClemReport,
    ConsistencyReport,
    DeepEvalReport,
    Leaderboard,
    PayoffRow,
    ScenarioReport,
    SimulReport,
)
from appliance.report.simulbench import Cell


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _interval(value: tuple[float, float] | None) -> str:
    return "-" if value is None else f"[{value[0]:.2f}, {value[1]:.2f}]"


def print_leaderboard(console: Console, board: Leaderboard) -> None:
    table = Table(
        title=f"{board.scenario} leaderboard, run {board.run_id} ({board.status}), panel '{board.panel}'",
        title_justify="left",
    )
    for column in (
        "model",
        "LN score",
        "95% CI",
        "final",
        "95% CI",
        "in-char",
        "entert.",
        "fluent",
        "refusals",
        "median len",
        "episodes",
        "failed",
        "unparsed",
        *(["calibrated", "95% CI"] if board.calibration else []),
    ):
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in board.rows:
        table.add_row(
            row.model,
            _number(row.ln_score),
            _interval(row.ln_score_ci),
            _number(row.final),
            _interval(row.final_ci),
            _number(row.in_character),
            _number(row.entertaining),
            _number(row.fluent),
            _number(row.refusal_ratio),
            _number(row.median_length, 0),
            str(row.episodes),
            str(row.failed_episodes),
            str(row.unparsed_verdicts),
            *([_number(row.calibrated_final), _interval(row.calibrated_final_ci)] if board.calibration else []),
        )
    console.print(table)
    console.print(
        f"Scores 1-5 (panel mean over judges, mean over turns, then over conversations); "
        f"LN score = final x sqrt(global median / model median) for models above the global median "
        f"length ({_number(board.global_median_length, 0)} chars). Intervals: bootstrap over conversations."
    )
    if board.calibration:
        c = board.calibration
        console.print(
            f"calibrated = final mapped to human '{c['criterion']}' of label set '{c['label_set']}' "
            f"(scale {c['human_scale']}) by calibration {c['calibration_id']} (template {c['template']})."
        )
    if len(board.panels) > 1:
        console.print(f"Panels scored in this run: {', '.join(board.panels)} (choose with --panel).")


def print_consistency(console: Console, report: ConsistencyReport) -> None:
    table = Table(
        title=f"{report.scenario}: consistency and robustness, run {report.run_id} ({report.status})",
        title_justify="left",
    )
    fields = sorted({field for row in report.rows for field in row.rcov_by_field})
    columns = ["model", "CA", "95% CI", "immutable", "social role", "relationship", "RCoV"]
    columns += [f"RCoV {field}" for field in fields]
    columns += ["profiles", "not fitting", "failed", "unparsed"]
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in report.rows:
        table.add_row(
            row.model,
            _number(row.ca),
            _interval(row.ca_ci),
            *(_number(row.ca_by_part.get(part)) for part in ("immutable", "social_role", "relationship")),
            _number(row.rcov, 3),
            *(_number(row.rcov_by_field.get(field), 3) for field in fields),
            str(row.profiles),
            str(row.not_fitting),
            str(row.failed),
            str(row.unparsed_answers),
        )
    console.print(table)
    console.print(
        "CA on base profiles = mean of the accuracy on answerable questions and on 'not enough information' "
        "questions (interval: bootstrap over questions). RCoV = std / mean of CA over a character's base profile "
        "and its variants, averaged over characters. Profiles longer than a model's context are counted as "
        "not fitting, never truncated."
    )


def print_clem_report(console: Console, report: ClemReport) -> None:
    overall = Table(title=f"{report.scenario}: clemscore, run {report.run_id} ({report.status})", title_justify="left")
    for column in ("player", "clemscore", "95% CI", "% played", "95% CI", "quality", "95% CI", "episodes", "failed"):
        overall.add_column(column, justify="left" if column == "player" else "right")
    for row in report.rows:
        overall.add_row(
            row.player,
            _number(row.clemscore),
            _interval(row.clemscore_ci),
            _number(row.played),
            _interval(row.played_ci),
            _number(row.quality),
            _interval(row.quality_ci),
            str(row.episodes),
            str(row.failed),
        )
    console.print(overall)
    games = Table(title="per game", title_justify="left")
    for column in ("player", "game", "% played", "quality", "95% CI", "std", "won", "lost", "aborted"):
        games.add_column(column, justify="left" if column in ("player", "game") else "right")
    for row in report.rows:
        for game in row.games:
            games.add_row(
                row.player,
                game.game,
                _number(game.played),
                _number(game.quality),
                _interval(game.quality_ci),
                _number(game.quality_std),
                str(game.won),
                str(game.lost),
                str(game.aborted),
            )
    console.print(games)
    console.print(
        "% played = episodes not aborted (a parse rule broken); quality = mean main score (0-100) of played "
        "episodes; both averaged over games; clemscore = % played x quality / 100. Lost games are played "
        "games. Intervals: bootstrap over episodes within each game."
    )


def _cell(cell: Cell) -> str:
    if cell.mean is None:
        return "-"
    return f"{cell.mean:.2f} {_interval(cell.ci)} n={cell.n}"


def print_simulbench_report(console: Console, report: SimulReport) -> None:
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
    console.print(
        "Payoffs: coins owned at the end (public goods), 1 win / 0.5 draw / 0 loss (chains), share of tests "
        "passed (programmer), the panel's 1-10 rating (reviewer, translator, proofreader). Stable: the "
        f"{report.confidence:.0%} bootstrap interval's half-width is at most {report.tolerance:g} x the payoff range."
    )


def print_report(console: Console, report: ScenarioReport) -> None:
    if isinstance(report, DeepEvalReport):
        print_deepeval_report(console, report)
    elif isinstance(report, SimulReport):
        print_simulbench_report(console, report)
    elif isinstance(report, ConsistencyReport):
        print_consistency(console, report)
    elif isinstance(report, ClemReport):
        print_clem_report(console, report)
    else:
        print_leaderboard(console, report)
