"""clembench as a scenario family: instances from a seed, a file or the store; one game master per game."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

from appliance.episodes.context import EpisodeContext, pair_label
from appliance.errors import ApplianceError
from appliance.scenarios.base import Instance, ScenarioFamily
from appliance.scenarios.clembench.games import game_of, variant_names
from appliance.scenarios.clembench.generate import generate_instance_set
from appliance.scenarios.clembench.instances import ClemInstance, InstanceSet, read_instance_set
from appliance.scenarios.clembench.master import Abort, GameTable, Outcome, episode_scores
from appliance.scenarios.clembench.published import read_published
from appliance.scenarios.clembench.report import game_row
from appliance.store import Store
from appliance.store.instance_sets import load_instance_set

DESCRIPTION = "dialogue games run by a programmatic game master (% played, quality, clemscore)"


async def play_game(table: GameTable, instance: ClemInstance) -> Outcome:
    """Run the instance's game to its end; a parse-rule break ends it as aborted."""
    try:
        return await game_of(instance.game).play(table, instance)
    except Abort as abort:
        table.ctx.record_note("gm", f"aborted: {abort}")
        return Outcome.aborted()


class ClembenchFamily(ScenarioFamily):
    """Scored by the game masters' rules: no judge panel."""

    description = DESCRIPTION

    def __init__(
        self, instance_set: InstanceSet, data_folder: Path, name: str = "clembench", sources: list[Path] | None = None
    ) -> None:
        self.name = name
        self.instance_set = instance_set
        self.data_folder = data_folder
        #: instance files the run plays from (their hashes are recorded with the run)
        self.sources = sources or []

    def instances(self) -> list[Instance]:
        return list(self.instance_set.instances)

    def data_files(self) -> list[Path]:
        return [*sorted(self.data_folder.glob("*.toml")), *self.sources]

    def select_instances(self, instances: list[Instance], limit: int | None, seed: int) -> list[Instance]:
        """`limit` counts per game row (a game in one language, as the report keeps them), spread over
        its experiments, so a short run still plays every row."""
        if limit is None:
            return list(instances)
        by_row: dict[tuple[str, str], dict[str, list[Instance]]] = defaultdict(lambda: defaultdict(list))
        for instance in instances:
            assert isinstance(instance, ClemInstance)
            by_row[(instance.game, game_row(instance.game, instance.language))][instance.experiment].append(instance)
        order = variant_names()
        chosen: list[Instance] = []
        rng = random.Random(seed)
        for row in sorted(by_row, key=lambda r: (order.index(r[0]) if r[0] in order else len(order), r[1])):
            pools = [rng.sample(pool, len(pool)) for _, pool in sorted(by_row[row].items())]
            picked: list[Instance] = []
            while len(picked) < limit and any(pools):
                for pool in pools:
                    if pool and len(picked) < limit:
                        picked.append(pool.pop())
            chosen.extend(picked)
        return chosen

    def two_player(self, instance: Instance) -> bool:
        return isinstance(instance, ClemInstance) and instance.game in game_of(instance.game).two_player

    async def play(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        assert isinstance(instance, ClemInstance)
        table = GameTable(ctx, language=instance.language or "en")
        outcome = await play_game(table, instance)
        ctx.scores.extend(
            episode_scores(outcome, table.requests, pair_label(ctx.model_for("player"), ctx.model_for("partner")))
        )
        ctx.metadata["turn_scores"] = outcome.turn_scores


def load_clembench(spec: str, source: str, data_folder: Path, *, seed: int, store: Store | None) -> ClembenchFamily:
    """`clembench` (fresh from `seed`), or `clembench:SOURCE` where SOURCE is an instance-set file,
    a published instances.json (or a folder of them), or the name of a set stored in `store`."""
    if not source:
        return ClembenchFamily(generate_instance_set(data_folder, seed), data_folder, spec)
    path = Path(source)
    if path.is_file() and path.name != "instances.json":
        return ClembenchFamily(_known_games(read_instance_set(path), str(path)), data_folder, spec, [path])
    if path.exists():
        files = [path] if path.is_file() else sorted(path.glob("*/instances.json"))
        return ClembenchFamily(read_published(path, data_folder), data_folder, spec, files)
    payload = load_instance_set(store, source) if store is not None else None
    if payload is None:
        raise ApplianceError(f"scenario '{spec}': '{source}' is neither a file, a folder nor a stored instance set")
    return ClembenchFamily(_known_games(InstanceSet.model_validate(payload), source), data_folder, spec)


def _known_games(instance_set: InstanceSet, source: str) -> InstanceSet:
    known = variant_names()
    unknown = sorted({i.game for i in instance_set.instances} - set(known))
    if unknown:
        raise ApplianceError(f"{source}: unknown game '{unknown[0]}' (known: {', '.join(known)})")
    return instance_set
