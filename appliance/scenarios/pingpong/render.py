"""The PingPong leaderboard on a terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from appliance.scenarios.pingpong.report import CALIBRATED_CRITERIA, PingPongLeaderboard
from appliance.util.terminal import interval as _interval
from appliance.util.terminal import number as _number

CRITERION_HEADERS = {"entertaining": "entert.", "fluent": "fluent"}


def print_leaderboard(console: Console, board: PingPongLeaderboard) -> None:
    """The paper's per-language tables first, then the pooled one (ours), then what the columns mean."""
    for table in board.by_language:
        console.print(_leaderboard_table(table, f"language '{table.language}' (as the paper reports)"))
        console.print(
            f"median of the models' mean reply lengths in '{table.language}': "
            f"{_number(table.median_of_mean_lengths, 0)} chars."
        )
    if board.by_language:
        languages = ", ".join(str(table.language) for table in board.by_language)
        console.print(_leaderboard_table(board, f"{languages} pooled (ours; the paper reports each language apart)"))
    else:
        console.print(_leaderboard_table(board, f"language '{board.language}'" if board.language else ""))
    ended = {row.model: row.ended_early for row in board.rows if row.ended_early}
    if ended:
        console.print(
            "Ended early (a prompt outgrew a model's context; the turns played are judged): "
            + ", ".join(f"{model} {count}" for model, count in ended.items())
            + "."
        )
    if board.judging.startswith("likelihood"):
        _print_likelihood_notes(console, board)
        return
    console.print(
        f"Scores 1-5 (judging: {board.judging}; panel mean over judges, mean over turns, then over "
        f"conversations). A conversation in which any judge flagged a turn as a refusal counts in 'refusals'; "
        f"that judge's verdicts on it are left out, the other judges score it. LN score = final x "
        f"(1 + 0.07 (median / mean len - 1)), clamped to [0.93, 1]; median of the models' mean reply lengths"
        f"{' (pooled)' if board.by_language else ''} = "
        f"{_number(board.median_of_mean_lengths, 0)} chars. cut = player replies / interrogator messages "
        f"stopped by the token cap. Intervals: bootstrap over conversations."
    )
    if board.calibration:
        console.print(f"calibrated = final mapped to {_calibration_words(board.calibration)}.")
    if len(board.panels) > 1:
        console.print(f"Panels scored in this run: {', '.join(board.panels)} (choose with --panel).")


def _leaderboard_table(board: PingPongLeaderboard, scope: str) -> Table:
    title = f"{board.scenario} leaderboard, run {board.run_id} ({board.status}), panel '{board.panel}'"
    table = Table(title=f"{title}, {scope}" if scope else title, title_justify="left")
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
        "mean len",
        "LN x",
        "episodes",
        "failed",
        "unparsed",
        "cut",
        *(["calibrated", "95% CI"] if board.calibration else []),
        *(f"cal. {CRITERION_HEADERS[metric]}" for metric in board.criterion_calibrations),
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
            "not measured" if row.refusal_ratio is None and row.judged_episodes else _number(row.refusal_ratio),
            _number(row.mean_length, 0),
            _number(row.length_factor, 3),
            str(row.episodes),
            str(row.failed_episodes),
            str(row.unparsed_verdicts),
            f"{row.cut_replies}/{row.cut_interrogator_messages}",
            *([_number(row.calibrated_final), _interval(row.calibrated_final_ci)] if board.calibration else []),
            *(_number(getattr(row, f"calibrated_{metric}")) for metric in board.criterion_calibrations),
        )
    return table


def _print_likelihood_notes(console: Console, board: PingPongLeaderboard) -> None:
    """What a likelihood panel's columns mean, and which criteria have human labels behind them."""
    console.print(
        f"Judging: {board.judging}, the judges' token probabilities (nothing sampled). final = how much likelier "
        "positive than negative follow-ups are after each reply (mean log-probability per token), panel mean, "
        "mean over turns, then over conversations. LN score applies PingPong's length factor to the calibrated "
        "final (the human scale); a raw log-probability difference gets none. Intervals: bootstrap over "
        "conversations."
    )
    if board.calibration:
        console.print(f"calibrated = the judges' features mapped to {_calibration_words(board.calibration)}.")
    else:
        console.print(
            "No calibration of this panel fits its template (run appliance calibrate): scores are raw features."
        )
    for metric, described in board.criterion_calibrations.items():
        console.print(f"cal. {CRITERION_HEADERS[metric]} = {metric} mapped to {_calibration_words(described)}.")
    calibrated = {"final", *board.criterion_calibrations}
    missing = [metric for metric in CALIBRATED_CRITERIA if metric not in calibrated]
    console.print(
        "In-character has no human label set here (none of the stored sets rates role consistency), so a "
        "likelihood panel leaves it empty and measures no refusals ('not measured')"
        + (f"; {' and '.join(missing)} found no calibration of this template" if missing else "")
        + "; a sampled panel (--panel sampled) fills the raw 1-5 columns. Held-out reports of the shipped "
        "calibrations: judges/calibrations/; of any other: appliance view."
    )


def _calibration_words(described: dict[str, object]) -> str:
    """Which human labels a calibration maps to and how well it agreed with them on held-out items."""
    spearman = described.get("heldout_spearman")
    agreement = f", held-out Spearman {spearman:.2f}" if isinstance(spearman, float) else ""
    return (
        f"human '{described['criterion']}' of label set '{described['label_set']}' (scale {described['human_scale']}"
        f"{agreement}) by calibration {described['calibration_id']} (template {described['template']})"
    )
