"""`appliance score RUN --panel NAME`: judge a stored run again without regenerating transcripts.

Each finished episode's messages are read back and handed to its family's
`judge`, exactly as at the end of play; the new panel's verdicts and scores
replace only that panel's earlier ones, so several panels coexist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from appliance.calibration.apply import calibrated_features, calibrated_scores, pick_calibrations
from appliance.catalog.models import Catalog
from appliance.catalog.panels import Panel
from appliance.engine.factory import open_backend
from appliance.episodes.client import derive_seed
from appliance.episodes.context import EpisodeContext, EpisodeKey, pair_label
from appliance.episodes.pool import ModelPool
from appliance.episodes.roles import BackendFactory, episode_roles
from appliance.episodes.scheduler import Scheduler
from appliance.errors import ApplianceError
from appliance.run.runner import prepare_stage
from appliance.run_config import RunConfig
from appliance.scenarios import load_run_family
from appliance.scenarios.base import Instance, JudgedFamily, ScenarioFamily
from appliance.store import MessageRecord, Store
from appliance.store.repair import Reconciliation, reconcile_run


@dataclass
class RescoreSummary:
    run_id: str
    panel: str
    episodes: int
    calibrations: dict[str, str]
    #: the store measured against the run's journal once the verdicts were written
    store_check: Reconciliation = field(default_factory=lambda: Reconciliation(""))


@dataclass(frozen=True)
class _StoredEpisode:
    episode_id: str
    family: JudgedFamily
    instance: Instance
    player: str
    partner: str
    seed: int
    messages: list[MessageRecord]


def _playable(store: Store, run_id: str, config: RunConfig) -> dict[tuple[str, str], tuple[ScenarioFamily, Instance]]:
    """(family name, instance id) -> the family (or stage) that plays it, and the instance.

    A staged family's later stages rebuild their instances from the run's stored episodes.
    """
    playable: dict[tuple[str, str], tuple[ScenarioFamily, Instance]] = {}
    for spec in config.scenarios:
        family = load_run_family(spec, config, store)
        for stage in family.stages():
            prepare_stage(stage, store, run_id)
            playable |= {(stage.name, instance.id): (stage, instance) for instance in stage.instances()}
    return playable


def _stored_episodes(store: Store, run_id: str, config: RunConfig) -> list[_StoredEpisode]:
    playable = _playable(store, run_id, config)
    episodes = []
    for episode_id, scenario, instance_id, player, partner, seed in store.finished_episodes(run_id):
        found = playable.get((scenario, instance_id))
        if found is None:
            raise ApplianceError(f"run '{run_id}': instance '{instance_id}' of '{scenario}' is no longer defined")
        family, instance = found
        if not isinstance(family, JudgedFamily) or not family.judge_template:
            continue  # rule-scored (clembench) or a stage without verdicts to redo
        messages = store.episode_messages(episode_id)
        episodes.append(_StoredEpisode(episode_id, family, instance, player, partner, seed, messages))
    return episodes


def rescore_run(
    store: Store,
    catalog: Catalog,
    run_id: str,
    panel: Panel,
    *,
    parallel: int = 8,
    backend_factory: BackendFactory = open_backend,
    on_episode: Callable[[int, int], None] | None = None,
) -> RescoreSummary:
    catalog.refuse_synthetic(panel.judges, "a rescoring")
    config = store.run(run_id).run_config()
    episodes = _stored_episodes(store, run_id, config)
    if not episodes:
        raise ApplianceError(f"{store.path}: run '{run_id}' has no finished episodes to score")
    # every stage of a staged family shares its name: one entry per stage, not per name
    calibrations = pick_calibrations(store, panel, list({id(e.family): e.family for e in episodes}.values()))
    done = 0

    async def judge(episode: _StoredEpisode, scheduler: Scheduler) -> None:
        label = pair_label(episode.player, episode.partner)
        ctx = EpisodeContext(
            episode_id=episode.episode_id,
            seed=derive_seed(episode.seed, "rescore", panel.name),
            scheduler=scheduler,
            roles=episode_roles(catalog, episode.player, episode.partner, {}, panel.judges),
            messages=list(episode.messages),
            exclude_self_judging=config.exclude_self_judging,
            likelihood_template=panel.likelihood_template_or_none,
            calibrated_features=calibrated_features(episode.family, calibrations),
            seed_key=EpisodeKey(run_id, episode.family.name, episode.instance.id, label).seed_key,
        )
        await episode.family.judge(ctx, episode.instance, list(panel.judges), panel.name)
        scores = calibrated_scores(episode.family, ctx.scores, ctx.judgments, calibrations)
        store.replace_panel_verdicts(episode.episode_id, run_id, panel.name, ctx.judgments, scores)

    def judged(episode: _StoredEpisode, result: None) -> None:
        nonlocal done
        done += 1
        if on_episode is not None:
            on_episode(done, len(episodes))

    with ModelPool.load(catalog, panel.judges, parallel=parallel, backend_factory=backend_factory) as pool:
        pool.play(episodes, judge, judged)
    calibrations_used = {f: r.calibration_id for f, r in calibrations.items()}
    return RescoreSummary(run_id, panel.name, len(episodes), calibrations_used, reconcile_run(store, run_id))
