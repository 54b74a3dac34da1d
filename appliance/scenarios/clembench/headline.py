"""clembench's headline metrics for `appliance compare`: clemscore, % played and quality, per episode."""

from __future__ import annotations

from collections.abc import Sequence

from appliance.headline import Headline, HeadlineMetric, Unit
from appliance.scenarios.clembench.report import EpisodeResult, aggregate, headline_results, load_results
from appliance.store.run_view import RunView


def _results(units: Sequence[Unit]) -> list[EpisodeResult]:
    return [EpisodeResult(u.group, bool(u.values["aborted"]), u.values.get("main")) for u in units]


def _played(units: Sequence[Unit]) -> float | None:
    return aggregate(_results(units)).average_played if units else None


def _quality(units: Sequence[Unit]) -> float | None:
    return aggregate(_results(units)).average_quality


def _clemscore(units: Sequence[Unit]) -> float | None:
    return aggregate(_results(units)).clemscore


def clembench_headline(run: RunView, panel: str | None) -> Headline:
    """One unit per episode of the English games (as clemscore), keyed by instance; clemcore's aggregation
    over the resampled units."""
    results, _ = load_results(run)
    units = [
        Unit(
            key=result.instance_id,
            player=player,
            values={"aborted": float(result.aborted), "main": result.main_score},
            group=result.game,
        )
        for player, rows in results.items()
        for result in headline_results(rows)
    ]
    return Headline(
        units=units,
        metrics=[
            HeadlineMetric("clemscore", _clemscore, description="average % played x average quality / 100"),
            HeadlineMetric("played", _played, description="% played, averaged over games"),
            HeadlineMetric("quality", _quality, description="main score of played episodes, averaged over games"),
        ],
    )
