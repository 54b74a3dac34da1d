"""SimulBench's headline metrics for `appliance compare`: the 1-10 rating on all scripts and the hard subset."""

from __future__ import annotations

from appliance.headline import Headline, HeadlineMetric, Unit, mean_of
from appliance.scenarios.simulbench.scripts import HARD_KINDS
from appliance.store import Store
from appliance.store.run_view import RunView


def simulbench_headline(store: Store, run_id: str, scenario: str, panel: str | None) -> Headline:
    """One unit per script and target. Pairwise win rates compare players within one run, so they are not
    gated here; two runs are compared through the ratings of the same scripts."""
    run = RunView(store, run_id, scenario)
    ratings = {s.episode_id: s.value for s in run.scores(panels=[panel or run.panel], metrics=["rating"])}
    units = []
    for episode in run.episodes(finished_only=True, instance_prefix="evaluate/"):
        rating = ratings.get(episode.episode_id)
        hard = episode.metadata.get("kind") in HARD_KINDS
        units.append(
            Unit(
                key=str(episode.metadata.get("script", episode.instance_id)),
                player=episode.player,
                values={"rating": rating, "rating_hard": rating if hard else None},
            )
        )
    return Headline(
        units=units,
        metrics=[
            HeadlineMetric("rating", mean_of("rating"), description="1-10, all scripts"),
            HeadlineMetric("rating_hard", mean_of("rating_hard"), description="1-10, FirstChan + SubseqChan"),
        ],
    )
