"""The SimulateBench consistency and robustness table on a terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from appliance.scenarios.simulatebench.report import ConsistencyReport, ConsistencyRow
from appliance.util.terminal import interval as _interval
from appliance.util.terminal import number as _number


def print_consistency(console: Console, report: ConsistencyReport) -> None:
    table = Table(
        title=f"{report.scenario}: consistency and robustness, run {report.run_id} ({report.status})",
        title_justify="left",
    )
    fields = sorted({field for row in report.rows for field in row.rcov_by_field})
    columns = ["model", "CA", "95% CI", "immutable", "social role", "relationship"]
    columns += [f"RCoV {field} %" for field in fields]
    columns += ["characters", "profiles", "not fitting", "failed", "unparsed"]
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in sorted(report.rows, key=lambda r: -1.0 if r.ca is None else r.ca, reverse=True):
        table.add_row(
            row.model,
            _number(row.ca),
            _interval(row.ca_ci),
            *(_number(row.ca_by_part.get(part)) for part in ("immutable", "social_role", "relationship")),
            *(_number(row.rcov_by_field.get(field), 2) for field in fields),
            str(row.characters),
            str(row.profiles),
            str(row.not_fitting),
            str(row.failed),
            str(row.unparsed_answers),
        )
    console.print(table)
    for row in report.rows:
        console.print(size_line(row))
    console.print(
        f"CA as SimulateBench computes it: per question type, 0.9 x accuracy on answerable + 0.1 x accuracy on "
        f"'not enough information' questions, weighted by the type's share of questions; per character on its "
        f"base profile, then averaged (interval: bootstrap over characters, none for one character). "
        f"Answers judged by: {report.answer_test}. RCoV % = std (ddof 1) / mean x 100 of CA over a character's "
        f"base profile and the variants of one field. Profiles longer than a model's context are counted as "
        f"not fitting, never truncated."
    )


def size_line(row: ConsistencyRow) -> str:
    """The run's size beside the paper's: long profiles lower CA there, and RCoV over few values is noisy."""
    questions = "?" if row.questions_per_character is None else f"{row.questions_per_character:.0f}"
    tokens = "" if row.profile_tokens is None else f"profiles of about {row.profile_tokens:,} tokens, "
    values = "" if row.rcov_values is None else f", RCoV over {row.rcov_values} values"
    return (
        f"Size for {row.model}: {tokens}{questions} questions per character{values}; "
        "the paper's characters: about 3,277 tokens and 150 questions, RCoV over 6-21 values."
    )
