"""The PingPong leaderboard on a terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from appliance.scenarios.pingpong.report import PingPongLeaderboard
from appliance.terminal import interval as _interval
from appliance.terminal import number as _number


def print_leaderboard(console: Console, board: PingPongLeaderboard) -> None:
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
