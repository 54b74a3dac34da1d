"""DeepEval as a staged family: each stage is a wave of repetitions.

The first wave plays every task `initial` times for every pairing of
players. Before each later wave, `prepare` reads the payoffs stored so far
and plans `step` more repetitions of the tasks whose payoff means are not yet
stable, until `max` (or `--limit`). Because waves read the store, a killed
run resumes in any wave. Instance ids are `<task>/r<repetition>`; repetition
r of a task plays its r-th item in a seeded order (a problem, a passage, an
opening word) and the public goods game in its mode.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from appliance.episodes.context import EpisodeContext
from appliance.judging.templates import load_roles_template
from appliance.run_config import SupportRole
from appliance.scenarios.base import Instance, JudgedFamily, ScenarioFamily, StagedFamily
from appliance.scenarios.deepeval.chain_dictionary import idiom_dictionary, noun_dictionary
from appliance.scenarios.deepeval.code_review import judge_code_review, load_problems, play_code_review
from appliance.scenarios.deepeval.payoffs import metric_samples, payoff_samples, task_is_stable
from appliance.scenarios.deepeval.public_goods import play_public_goods
from appliance.scenarios.deepeval.settings import SETTINGS_FILE, DeepEvalSettings
from appliance.scenarios.deepeval.tasks import TASKS, TaskSpec, task_specs
from appliance.scenarios.deepeval.translation import (
    judge_translation,
    load_passages,
    play_translation,
    translation_order,
)
from appliance.scenarios.deepeval.word_chain import play_word_chain, read_word_list
from appliance.store.run_view import RunView

JUDGE_TEMPLATE = "deepeval_role_rating"
DESCRIPTION = "models interact through a referee's message pool: public goods, word chains, code review, translation"


class DeepEvalInstance(Instance):
    task: str
    repetition: int
    #: the item this repetition plays: a problem or passage id, an opening word, or the game's mode
    item: str

    def describe(self) -> dict[str, str]:
        return {"task": self.task, "item": self.item, "repetition": str(self.repetition)}


class DeepEvalData:
    """Everything the tasks read: settings, word lists, problems, passages and the judge template."""

    def __init__(self, folder: Path, judges_folder: Path, seed: int) -> None:
        self.settings = DeepEvalSettings.load(folder / SETTINGS_FILE)
        self.idioms = read_word_list(folder / "idioms.txt", "idiom", idiom_dictionary())
        self.words = read_word_list(folder / "words.txt", "english", noun_dictionary())
        self.problems = {p.id: p for p in load_problems(folder / "code_problems.toml")}
        passages = load_passages(folder / "passages.toml")
        self.passages = {p.id: p for p in passages}
        self.template = load_roles_template(judges_folder / f"{JUDGE_TEMPLATE}.toml")
        names = ["deepeval.toml", "idioms.txt", "words.txt", "code_problems.toml", "passages.toml"]
        self.files = [*(folder / name for name in names), judges_folder / f"{JUDGE_TEMPLATE}.toml"]
        rng = random.Random(seed)
        self.items: dict[str, list[str]] = {
            "public_goods_mode1": ["mode1"],
            "public_goods_mode2": ["mode2"],
            "idiom_chain": rng.sample(self.idioms.openings(), len(self.idioms.openings())),
            "word_chain": rng.sample(self.words.openings(), len(self.words.openings())),
            "code_review": rng.sample(sorted(self.problems), len(self.problems)),
            "translation": translation_order(passages, self.settings.translation.pairs, rng, folder / SETTINGS_FILE),
        }

    def specs_for(self, players: int) -> list[TaskSpec]:
        """The tasks as a run with `players` models plays them (public goods seats one each from three)."""
        return task_specs(self.settings.public_goods, players)

    def instance(self, task: str, repetition: int) -> DeepEvalInstance:
        items = self.items[task]
        item = items[repetition % len(items)]
        return DeepEvalInstance(id=f"{task}/r{repetition:02d}", task=task, repetition=repetition, item=item)


Play = Callable[[DeepEvalData, EpisodeContext, DeepEvalInstance], Awaitable[None]]
Judge = Callable[[DeepEvalData, EpisodeContext, DeepEvalInstance, list[str], str], Awaitable[None]]


@dataclass(frozen=True)
class TaskRules:
    """How one task is played, and judged where a panel rates it (the writer-editor tasks)."""

    play: Play
    judge: Judge | None = None


async def _public_goods(data: DeepEvalData, ctx: EpisodeContext, instance: DeepEvalInstance) -> None:
    await play_public_goods(ctx, data.settings, int(instance.item.removeprefix("mode")))


async def _idiom_chain(data: DeepEvalData, ctx: EpisodeContext, instance: DeepEvalInstance) -> None:
    await play_word_chain(ctx, data.settings, data.idioms, instance.item)


async def _word_chain(data: DeepEvalData, ctx: EpisodeContext, instance: DeepEvalInstance) -> None:
    await play_word_chain(ctx, data.settings, data.words, instance.item)


async def _code_review(data: DeepEvalData, ctx: EpisodeContext, instance: DeepEvalInstance) -> None:
    await play_code_review(ctx, data.settings, data.problems[instance.item])


async def _judge_code_review(
    data: DeepEvalData, ctx: EpisodeContext, instance: DeepEvalInstance, judges: list[str], panel: str
) -> None:
    await judge_code_review(ctx, data.settings, data.problems[instance.item], data.template, judges, panel)


async def _translation(data: DeepEvalData, ctx: EpisodeContext, instance: DeepEvalInstance) -> None:
    await play_translation(ctx, data.settings, data.passages[instance.item])


async def _judge_translation(
    data: DeepEvalData, ctx: EpisodeContext, instance: DeepEvalInstance, judges: list[str], panel: str
) -> None:
    await judge_translation(ctx, data.settings, data.passages[instance.item], data.template, judges, panel)


#: every task of `tasks.TASKS`, by id
TASK_RULES: dict[str, TaskRules] = {
    "public_goods_mode1": TaskRules(_public_goods),
    "public_goods_mode2": TaskRules(_public_goods),
    "idiom_chain": TaskRules(_idiom_chain),
    "word_chain": TaskRules(_word_chain),
    "code_review": TaskRules(_code_review, _judge_code_review),
    "translation": TaskRules(_translation, _judge_translation),
}


def task_rules(task: str) -> TaskRules:
    if task not in TASK_RULES:
        raise ValueError(f"unknown DeepEval task '{task}' (known: {', '.join(TASK_RULES)})")
    return TASK_RULES[task]


class WaveStage(JudgedFamily):
    """One wave of repetitions; every wave is played by the same rules."""

    description = DESCRIPTION
    judge_template = JUDGE_TEMPLATE
    runs_model_code = True  # code review

    def __init__(self, name: str, data: DeepEvalData, wave: int) -> None:
        self.name = name
        self.data = data
        self.wave = wave
        rule = data.settings.repetitions
        #: the repetitions this wave may add: [first, last)
        self.first = 0 if wave == 0 else rule.initial + (wave - 1) * rule.step
        self.last = min(rule.initial + wave * rule.step, rule.max)
        self._instances: list[Instance] = []
        if wave == 0:
            self._instances = [data.instance(task, r) for task in TASKS for r in range(self.first, self.last)]

    def instances(self) -> list[Instance]:
        return list(self._instances)

    def data_files(self) -> list[Path]:
        return list(self.data.files)

    def select_instances(self, instances: list[Instance], limit: int | None, seed: int) -> list[Instance]:
        """`--limit` caps the repetitions of every task."""
        cap = self.data.settings.repetitions.max if limit is None else limit
        return [i for i in instances if isinstance(i, DeepEvalInstance) and i.repetition < cap]

    def pairings(
        self, players: list[str], support: Mapping[SupportRole, str], instance: Instance, cross_play: bool
    ) -> list[tuple[str, str]]:
        """Each ordered pair of distinct players (so roles and speaking order swap); self-play for one player."""
        if len(players) == 1:
            return [(players[0], players[0])]
        return [(a, b) for a in players for b in players if a != b]

    def table(self, players: list[str], instance: Instance) -> tuple[str, ...]:
        """Three or more models play the public goods game together, a seat each, as in the paper."""
        if isinstance(instance, DeepEvalInstance) and instance.task.startswith("public_goods") and len(players) >= 3:
            return tuple(players)
        return ()

    def lineage(self, instance: Instance) -> str:
        """Whether a task needs another wave reads all its repetitions: a task stays in one shard."""
        assert isinstance(instance, DeepEvalInstance)
        return instance.task

    def prepare(self, run: RunView) -> None:
        """Plan more repetitions of each task whose payoffs are not yet stable. A stable task stays
        stable (nothing new is stored for it), and repetitions past `--limit` are dropped by
        `select_instances`, so the stored payoffs alone decide."""
        if self.wave == 0:
            return
        specs = self.data.specs_for(len(run.config["players"]))
        payoffs = payoff_samples(metric_samples(run, run.panel), specs)
        rule = self.data.settings.repetitions
        unstable = [spec.id for spec in specs if not task_is_stable(spec, payoffs, rule)]
        self._instances = [self.data.instance(task, r) for task in unstable for r in range(self.first, self.last)]

    async def play(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        assert isinstance(instance, DeepEvalInstance)
        await task_rules(instance.task).play(self.data, ctx, instance)
        await self.judge(ctx, instance, judges, panel)

    async def judge(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        """Only the writer-editor tasks have verdicts; the games are scored by their rules."""
        assert isinstance(instance, DeepEvalInstance)
        rules = task_rules(instance.task)
        if rules.judge is not None:
            await rules.judge(self.data, ctx, instance, judges, panel)


class DeepEvalFamily(StagedFamily):
    description = DESCRIPTION
    judge_template = JUDGE_TEMPLATE

    def __init__(self, name: str, data: DeepEvalData) -> None:
        self.name = name
        self.data = data
        self._stages = [WaveStage(name, data, wave) for wave in range(data.settings.repetitions.waves())]

    def stages(self) -> list[ScenarioFamily]:
        """The waves; the first plays every task's first repetitions."""
        return list(self._stages)

    def settings_snapshot(self) -> dict[str, object]:
        """deepeval.toml as the run plays it: the report reads this, not the file as it is later."""
        return self.data.settings.model_dump(mode="json")
