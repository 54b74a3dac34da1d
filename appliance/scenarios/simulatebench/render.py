"""The SimulateBench consistency and robustness table on a terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from appliance.scenarios.simulatebench.report import ConsistencyReport
from appliance.terminal import interval as _interval
from appliance.terminal import number as _number


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
