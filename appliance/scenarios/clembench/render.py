"""The clembench clemscore tables on a terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from appliance.scenarios.clembench.report import MIN_EPISODES_PER_ROW, ClemReport, ClemRow
from appliance.util.terminal import interval as _interval
from appliance.util.terminal import number as _number


def _overall_table(title: str, rows: list[ClemRow]) -> Table:
    overall = Table(title=title, title_justify="left")
    for column in ("player", "clemscore", "95% CI", "% played", "95% CI", "quality", "95% CI", "episodes", "failed"):
        overall.add_column(column, justify="left" if column == "player" else "right")
    for row in rows:
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
    return overall


def print_clem_report(console: Console, report: ClemReport) -> None:
    title = f"{report.scenario}: clemscore (self-play, English games), run {report.run_id} ({report.status})"
    console.print(_overall_table(title, report.rows))
    if report.cross_play:
        console.print(_overall_table("cross-play (A--B: A in the first role; two-player games)", report.cross_play))
    if report.languages:
        console.print(_languages_table(report))
    console.print(_games_table(report))
    thin = sorted({game.game for row in report.rows for game in row.games if game.episodes < MIN_EPISODES_PER_ROW})
    if thin:
        console.print(
            f"Fewer than {MIN_EPISODES_PER_ROW} episodes per player in {', '.join(thin)}: those rows say little "
            f"(a run of `--scenario clembench` plays {MIN_EPISODES_PER_ROW} per game row).",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    for row in [*report.rows, *report.cross_play]:
        for cause, count in sorted(row.failures.items()):
            console.print(f"{row.player}: {count} episodes failed to run and count as aborted: {cause}", markup=False)
    console.print(
        "% played = episodes not aborted (a parse rule broken, or the episode failed to run); quality = mean "
        "main score (0-100) of played episodes; both averaged over games; clemscore = % played x quality / 100. "
        "Lost games are played games. Intervals: bootstrap over episodes within each game. Cut: player "
        "replies that reached their token cap (sized per instance from the model's tokenizer)."
    )


def _languages_table(report: ClemReport) -> Table:
    languages = Table(title="languages against English (the paper's Table 2)", title_justify="left")
    for column in ("player", "game", "language", "% played", "change", "quality", "change"):
        languages.add_column(column, justify="left" if column in ("player", "game", "language") else "right")
    for lang in report.languages:
        languages.add_row(
            lang.player,
            lang.game,
            lang.language,
            _number(lang.played),
            _number(lang.played_change),
            _number(lang.quality),
            _number(lang.quality_change),
        )
    return languages


def _games_table(report: ClemReport) -> Table:
    games = Table(title="per game", title_justify="left")
    columns = ("player", "game", "episodes", "% played", "quality", "95% CI", "std", "won", "lost", "aborted", "cut")
    for column in columns:
        games.add_column(column, justify="left" if column in ("player", "game") else "right")
    for row in [*report.rows, *report.cross_play]:
        for game in row.games:
            games.add_row(
                row.player,
                game.game,
                str(game.episodes),
                _number(game.played),
                _number(game.quality),
                _interval(game.quality_ci),
                _number(game.quality_std),
                str(game.won),
                str(game.lost),
                str(game.aborted),
                str(game.cut_replies),
            )
    return games
