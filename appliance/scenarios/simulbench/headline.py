"""SimulBench's headline metrics for `appliance compare` and the page: the 1-10 rating on all scripts
and on the hard subset, over the same scripts as the report (`compared_scripts`)."""

from __future__ import annotations

from appliance.headline import Headline, HeadlineMetric, Unit, WithinRun, mean_of
from appliance.scenarios.simulbench.report import compared_scripts, pair_outcomes
from appliance.scenarios.simulbench.scripts import HARD_KINDS
from appliance.store.run_view import RunView


def simulbench_headline(run: RunView, panel: str | None) -> Headline:
    """One unit per compared script and target. Pairwise win rates compare players within one run, so they
    are not gated here; two runs are compared through the ratings of the same scripts."""
    compared = compared_scripts(run, panel or run.panel)
    units = []
    for script in compared.common:
        hard = compared.scripts[script].get("kind") in HARD_KINDS
        for player, rating in sorted(compared.ratings[script].items()):
            units.append(
                Unit(key=script, player=player, values={"rating": rating, "rating_hard": rating if hard else None})
            )
    # the pairwise verdicts as points (win 1, tie 0.5, lose 0) of each player on each compared script
    points = []
    for script, first, second, outcome in pair_outcomes(run, panel or run.panel):
        points.append(Unit(key=script, player=first, values={"pairwise": (1.0 + outcome) / 2}))
        points.append(Unit(key=script, player=second, values={"pairwise": (1.0 - outcome) / 2}))
    pairwise = HeadlineMetric(
        "pairwise", mean_of("pairwise"), description="pairwise points: win 1, tie 0.5, lose 0", judged_by="pair_outcome"
    )
    return Headline(
        units=units,
        metrics=[
            HeadlineMetric("rating", mean_of("rating"), description="1-10, compared scripts", judged_by="rating"),
            HeadlineMetric(
                "rating_hard", mean_of("rating_hard"), description="1-10, FirstChan + SubseqChan", judged_by="rating"
            ),
        ],
        within_run=[WithinRun(pairwise, points)],
    )
