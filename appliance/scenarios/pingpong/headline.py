"""PingPong's headline metrics for `appliance compare`: final and LN score, refusal ratio, per conversation."""

from __future__ import annotations

from appliance.headline import Headline, HeadlineMetric, Unit, mean_of
from appliance.scenarios.pingpong.report import judging_mode, length_factor, reply_lengths
from appliance.store.run_view import RunView


def pingpong_headline(run: RunView, panel: str | None) -> Headline:
    """One unit per conversation (instance and player), with the report's rules: a conversation is
    scored by the judges that did not flag it as a refusal, and the LN score scales a rating.

    The LN score of a conversation is its final score times its model's length factor in that run,
    as the leaderboard computes it; the factor is held fixed while conversations are resampled.
    """
    panel_name = panel or run.panel
    episodes = run.episodes()
    means, median_of_means = reply_lengths(episodes, run.messages(speaker="player"))
    factors = {player: length_factor(value, median_of_means) for player, value in means.items()}
    scores: dict[str, dict[str, float | None]] = {}
    calibrated: dict[str, float | None] = {}
    for score in run.scores(panels=[panel_name], metrics=["final", "refusal"]):
        scores.setdefault(score.episode_id, {})[score.metric] = score.value
        if score.metric == "final":
            calibrated[score.episode_id] = score.calibrated_value
    rating_scale = not judging_mode(episodes).startswith("likelihood")
    units = []
    for episode in (e for e in episodes if e.finished):
        own = scores.get(episode.episode_id, {})
        final, refusal = own.get("final"), own.get("refusal")
        scaled = final if rating_scale else calibrated.get(episode.episode_id)  # as the report's LN score
        units.append(
            Unit(
                key=episode.instance_id,
                player=episode.player,
                group=str(episode.metadata.get("language", "")),  # the page shows each language apart
                values={
                    "final": final,
                    "ln_score": None if scaled is None else scaled * factors.get(episode.player, 1.0),
                    "refused": refusal,
                    "calibrated": calibrated.get(episode.episode_id),
                },
            )
        )
    return Headline(
        units=units,
        metrics=[
            HeadlineMetric(
                "final",
                mean_of("final"),
                description="mean of the criteria, a refusing judge's left out",
                judged_by="final",
            ),
            HeadlineMetric("ln_score", mean_of("ln_score"), description="length-normalised final", judged_by="final"),
            HeadlineMetric("refusal_ratio", mean_of("refused"), higher_is_better=False, judged_by="refusal"),
            *(
                [
                    HeadlineMetric(
                        "calibrated", mean_of("calibrated"), description="final on a human scale", judged_by="final"
                    )
                ]
                if any(value is not None for value in calibrated.values())
                else []
            ),
        ],
        settings={"judging": judging_mode(episodes), "panel": panel_name},
    )
