"""DeepEval's headline metrics for `appliance compare`: each task's payoff per role."""

from __future__ import annotations

from appliance.headline import Headline, HeadlineMetric, Unit, mean_of
from appliance.scenarios.base import RULE_SCORER
from appliance.scenarios.deepeval.payoffs import task_of
from appliance.scenarios.deepeval.report import run_settings
from appliance.scenarios.deepeval.tasks import task_specs
from appliance.store.run_view import RunView


def deepeval_headline(run: RunView, panel: str | None) -> Headline:
    """One unit per episode and player: its payoff in each role it played. Both orders of a pairing
    play the same instance, so a unit's key is its episode without the run id (instance and pairing),
    which pairs it with the same episode of another run."""
    settings, _ = run_settings(run, run.scenario)
    specs = task_specs(settings.public_goods, len(run.config["players"]))
    payoff_metrics = {(spec.id, payoff.metric): role for spec in specs for role, payoff in spec.payoffs.items()}
    values: dict[tuple[str, str], dict[str, float | None]] = {}
    for score in run.scores(panels=[RULE_SCORER, panel or run.panel]):
        task = task_of(score.instance_id)
        role = payoff_metrics.get((task, score.metric))
        if role is not None:
            episode = score.episode_id.removeprefix(f"{run.run_id}:")  # the episode's identity across runs
            values.setdefault((episode, score.player), {})[f"{task}.{role}"] = score.value
    units = [Unit(key=episode, player=player, values=own) for (episode, player), own in values.items()]
    names = sorted({f"{task}.{role}" for (task, _), role in payoff_metrics.items()})
    # a role's rating is the panel's verdict; coins, points and tests passed are the rules'
    judged = {
        f"{task}.{role}": metric for (task, metric), role in payoff_metrics.items() if metric.startswith("rating")
    }
    return Headline(
        units=units,
        metrics=[
            HeadlineMetric(name, mean_of(name), description="payoff", judged_by=judged.get(name)) for name in names
        ],
    )
