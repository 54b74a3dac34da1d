"""SimulBench's pipeline as four stages, each a scenario family whose episodes the runner stores.

collect  (task x dialogue)  the user agent talks to the fixed simulator for up to 4 turns
extract  (dialogue)         the panel marks challenging turns; the dialogue's test scripts
evaluate (script x target)  the target answers the script's last request; the panel rates it 1-10
compare  (script x pair)    the panel compares two targets' answers in both orders

Later stages read earlier stages' episodes of the same run in `prepare`, so a
killed run resumes at any stage. Imported scripts skip the first two stages.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from appliance.catalog.sampling import Sampling
from appliance.engine.types import Message
from appliance.episodes.client import EpisodeFailed
from appliance.episodes.context import EpisodeContext, pair_label
from appliance.judging.fitting import first_that_fits
from appliance.judging.scoring import pair_reading
from appliance.judging.scoring_templates import PREFERENCE, LikelihoodTemplate
from appliance.judging.templates import PairwiseTemplate, RatingTemplate, YesNoTemplate
from appliance.judging.verdicts import ask_judge, judge_pair
from appliance.run_config import SupportRole
from appliance.scenarios.base import Instance, JudgedFamily, ScenarioFamily
from appliance.scenarios.simulbench.scripts import (
    DialogueTurn,
    TestScript,
    dialogue_of,
    extract_scripts,
    history_until,
    render_turns,
)
from appliance.scenarios.simulbench.tasks import SimulBenchTask
from appliance.scenarios.simulbench.user_agent import (
    SimulBenchSettings,
    StrategyError,
    StrategyReply,
    parse_strategy_reply,
    strategy_grammar,
    user_agent_messages,
)
from appliance.scenarios.simulbench.verdicts import (
    first_challenging_turn,
    pair_scores,
    rating_scores,
    read_pair_scores,
)
from appliance.store.records import JudgmentRecord, MessageRecord
from appliance.store.run_view import RunView

#: user agent attempts per turn before the dialogue ends early
AGENT_ATTEMPTS = 2


class CollectInstance(Instance):
    task: SimulBenchTask
    dialogue: int

    @property
    def dialogue_id(self) -> str:
        return _dialogue_id(self.task, self.dialogue)

    def describe(self) -> dict[str, str]:
        return {"stage": "collect", "task": self.task.id, "task_type": self.task.type}


def _dialogue_id(task: SimulBenchTask, dialogue: int) -> str:
    return f"{task.id}/d{dialogue}"


class ExtractInstance(Instance):
    task: SimulBenchTask
    dialogue_id: str
    turns: list[DialogueTurn]

    def describe(self) -> dict[str, str]:
        return {"stage": "extract", "task": self.task.id, "task_type": self.task.type}


class ScriptInstance(Instance):
    script: TestScript

    @property
    def dialogue_id(self) -> str:
        return dialogue_of(self.script)

    def describe(self) -> dict[str, str]:
        script = self.script
        return {
            "stage": "evaluate",
            "script": script.id,
            "task": script.task.id,
            "task_type": script.task.type,
            "kind": script.kind,
            "turn": str(script.turn),
        }


class CompareInstance(ScriptInstance):
    def describe(self) -> dict[str, str]:
        return {**super().describe(), "stage": "compare"}


class _Stage(ScenarioFamily):
    """What every stage shares: the family's name, data files and settings."""

    description = "a stage of SimulBench"

    def __init__(self, name: str, settings: SimulBenchSettings, files: list[Path]) -> None:
        self.name = name
        self.settings = settings
        self.files = files
        self._instances: list[Instance] = []

    def instances(self) -> list[Instance]:
        return list(self._instances)

    def data_files(self) -> list[Path]:
        return list(self.files)

    def select_instances(self, instances: list[Instance], limit: int | None, seed: int) -> list[Instance]:
        """Later stages take everything the stage before them produced (`--limit` chose the tasks)."""
        return list(instances)

    def lineage(self, instance: Instance) -> str:
        """A dialogue, the scripts extracted from it and every player's answers to those stay in one shard."""
        assert isinstance(instance, CollectInstance | ExtractInstance | ScriptInstance)
        return instance.dialogue_id

    @staticmethod
    def _finished(run: RunView, stage: str) -> list[tuple[str, dict[str, Any]]]:
        """(instance id, metadata) of this run's finished episodes of `stage`."""
        return [(e.instance_id, e.metadata) for e in run.episodes(finished_only=True, instance_prefix=f"{stage}/")]


class _SimulatorStage(_Stage):
    """Collection and extraction are played by the one fixed simulator, whatever the players."""

    def pairings(
        self, players: list[str], support: Mapping[SupportRole, str], instance: Instance, cross_play: bool
    ) -> list[tuple[str, str]]:
        return [(support["simulator"], support["simulator"])]


class CollectStage(_SimulatorStage):
    support_roles: tuple[SupportRole, ...] = ("user_agent", "simulator")

    def __init__(self, name: str, settings: SimulBenchSettings, files: list[Path], tasks: list[SimulBenchTask]) -> None:
        super().__init__(name, settings, files)
        self._instances = [
            CollectInstance(id=f"collect/{_dialogue_id(task, k)}", task=task, dialogue=k)
            for task in tasks
            for k in range(settings.dialogues_per_task)
        ]

    def select_instances(self, instances: list[Instance], limit: int | None, seed: int) -> list[Instance]:
        """`--limit` counts tasks (a seeded sample); every dialogue of a chosen task is collected."""
        task_ids = list(dict.fromkeys(i.task.id for i in instances if isinstance(i, CollectInstance)))
        random.Random(seed).shuffle(task_ids)
        chosen = set(task_ids if limit is None else task_ids[:limit])
        return [i for i in instances if isinstance(i, CollectInstance) and i.task.id in chosen]

    async def play(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        assert isinstance(instance, CollectInstance)
        max_turns = min(self.settings.max_turns, ctx.max_turns or self.settings.max_turns)
        turns, failures = await collect_dialogue(ctx, self.settings, instance.task, max_turns)
        ctx.metadata["turns"] = [turn.model_dump() for turn in turns]
        ctx.metadata["strategies"] = [turn.strategy for turn in turns[1:]]
        ctx.metadata["agent_failures"] = failures


async def collect_dialogue(
    ctx: EpisodeContext, settings: SimulBenchSettings, task: SimulBenchTask, max_turns: int
) -> tuple[list[DialogueTurn], int]:
    """The opening, then the user agent's requests, each answered by the simulator; returns the turns
    and how many user agent replies were rejected. Both conversations keep their KV between turns."""
    simulator = Sampling(temperature=settings.simulator_temperature, max_tokens=settings.simulator_max_tokens)
    opening = task.opening(settings.opening)
    ctx.record_note("user", opening)
    history = [Message(role="user", content=opening)]
    reply = await ctx.generate("simulator", history, sampling=simulator)
    turns = [DialogueTurn(request=opening, reply=reply.text, strategy="opening")]
    failures = 0
    while len(turns) < max_turns:
        choice, rejected = await next_request(ctx, settings, task, turns)
        failures += rejected
        if choice is None:
            ctx.record_note("gm", f"dialogue ended after turn {len(turns)}: the user agent gave no valid request")
            break
        history += [Message(role="assistant", content=reply.text), Message(role="user", content=choice.request)]
        ctx.record_note("user", choice.request)
        reply = await ctx.generate("simulator", history, sampling=simulator)
        turns.append(DialogueTurn(request=choice.request, reply=reply.text, strategy=choice.strategy))
    return turns, failures


async def next_request(
    ctx: EpisodeContext, settings: SimulBenchSettings, task: SimulBenchTask, turns: list[DialogueTurn]
) -> tuple[StrategyReply | None, int]:
    """The user agent's strategy and request; each rejected reply is noted in the transcript."""
    sampling = Sampling(temperature=settings.user_agent_temperature, max_tokens=settings.user_agent_max_tokens)
    grammar = strategy_grammar()
    messages = user_agent_messages(settings, task, turns)
    for attempt in range(AGENT_ATTEMPTS):
        completion = await ctx.generate("user_agent", messages, sampling=sampling, grammar=grammar)
        try:
            return parse_strategy_reply(completion.text, cut=completion.finish_reason == "length"), attempt
        except StrategyError as error:
            ctx.record_note("gm", f"user agent reply rejected ({error})")
    return None, AGENT_ATTEMPTS


class ExtractStage(_SimulatorStage, JudgedFamily):
    """Not rescored by `appliance score`: the scripts it extracts define what the later stages evaluate."""

    def __init__(
        self,
        name: str,
        settings: SimulBenchSettings,
        files: list[Path],
        tasks: list[SimulBenchTask],
        template: YesNoTemplate,
    ) -> None:
        super().__init__(name, settings, files)
        self.tasks = {task.id: task for task in tasks}
        self.template = template

    def prepare(self, run: RunView) -> None:
        self._instances = []
        for instance_id, metadata in self._finished(run, "collect"):
            task = self.tasks[str(metadata["task"])]
            turns = [DialogueTurn.model_validate(turn) for turn in metadata.get("turns", [])]
            dialogue_id = instance_id.removeprefix("collect/")
            self._instances.append(
                ExtractInstance(id=f"extract/{dialogue_id}", task=task, dialogue_id=dialogue_id, turns=turns)
            )

    async def play(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        await self.judge(ctx, instance, judges, panel)

    async def judge(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        """Every judge checks every turn at once; the first turn a majority marks is the first challenging one."""
        assert isinstance(instance, ExtractInstance)
        task = instance.task
        checks = []
        for number, turn in enumerate(instance.turns, start=1):
            before = history_until(instance.turns, number)[:-1]
            variants = [
                {
                    "task": task.summary(),
                    "history": render_turns(before, keep),
                    "request": turn.request,
                    "reply": turn.reply,
                }
                for keep in range(len(before), -1, -1)
            ]
            checks += [
                ask_judge(
                    ctx,
                    self.template,
                    variants[0],
                    judge_model=judge,
                    panel=panel,
                    target_idx=number,
                    shorter=variants[1:],
                )
                for judge in judges
            ]
        await asyncio.gather(*checks)
        first = first_challenging_turn(ctx.judgments, len(instance.turns))
        scripts = extract_scripts(task, instance.dialogue_id, instance.turns, first)
        ctx.metadata["first_challenging_turn"] = first or 0
        ctx.metadata["scripts"] = [script.model_dump(mode="json") for script in scripts]


class EvaluateStage(_Stage, JudgedFamily):
    judge_template = "simulbench_rating"
    calibrated_metric = "rating"

    def __init__(
        self,
        name: str,
        settings: SimulBenchSettings,
        files: list[Path],
        template: RatingTemplate,
        scripts: list[TestScript] | None,
    ) -> None:
        """`scripts` None: the scripts this run's extract stage produced; otherwise imported ones."""
        super().__init__(name, settings, files)
        self.template = template
        self.from_run = scripts is None
        self.scripts = scripts or []
        self._instances = [ScriptInstance(id=f"evaluate/{s.id}", script=s) for s in self.scripts]

    def select_instances(self, instances: list[Instance], limit: int | None, seed: int) -> list[Instance]:
        """Imported scripts: `--limit` is a seeded sample of them; extracted ones are all evaluated."""
        if self.from_run or limit is None:
            return list(instances)
        chosen = list(instances)
        random.Random(seed).shuffle(chosen)
        return chosen[:limit]

    def prepare(self, run: RunView) -> None:
        if not self.from_run:
            return
        self.scripts = [
            TestScript.model_validate(script)
            for _, metadata in self._finished(run, "extract")
            for script in metadata.get("scripts", [])
        ]
        self._instances = [ScriptInstance(id=f"evaluate/{s.id}", script=s) for s in self.scripts]

    async def play(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        """The target answers the last request greedily, given the script's history; the history is kept
        as notes so the stored transcript reads whole."""
        assert isinstance(instance, ScriptInstance)
        script = instance.script
        for turn in script.history:
            ctx.record_note(turn.role, turn.content)
        sampling = Sampling(temperature=0.0, max_tokens=self.settings.target_max_tokens)
        await ctx.generate("player", script.messages(), sampling=sampling)
        await self.judge(ctx, instance, judges, panel)

    async def judge(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        assert isinstance(instance, ScriptInstance)
        script = instance.script
        reply = _last_by(ctx.messages, "player")
        variants = [
            {
                "task": script.task.summary(),
                "history": script.earlier_turns(keep),
                "request": script.request,
                "response": reply.text.strip() or "(empty reply)",
            }
            for keep in range(script.earlier_turn_count(), -1, -1)
        ]
        await asyncio.gather(
            *(
                ask_judge(
                    ctx,
                    self.template,
                    variants[0],
                    judge_model=judge,
                    panel=panel,
                    target_idx=reply.idx,
                    shorter=variants[1:],
                )
                for judge in judges
            )
        )
        ctx.scores.extend(rating_scores(ctx.judgments, panel=panel, player=ctx.model_for("player")))


#: the template a likelihood panel reads a comparison with: the one PandaLM's pairs are calibrated with
PAIR_LIKELIHOOD_TEMPLATE = "instruction_likelihood"


class CompareStage(_Stage, JudgedFamily):
    judge_template = "simulbench_pairwise"
    # under a likelihood panel the pair is read as calibration on PandaLM's pairs reads them, and that
    # calibration (its fitted tie band) decides the outcome; a sampled panel asks the paper's verdicts
    scores_likelihood = True
    own_likelihood_template = PAIR_LIKELIHOOD_TEMPLATE
    calibrated_metric = "pair_outcome"
    calibrated_kind = "pair"
    likelihood_targets = MappingProxyType({"pair_outcome": ("pandalm", "preference")})

    def __init__(
        self,
        name: str,
        settings: SimulBenchSettings,
        files: list[Path],
        template: PairwiseTemplate,
        evaluate: EvaluateStage,
        reading: LikelihoodTemplate,
    ) -> None:
        super().__init__(name, settings, files)
        self.template = template
        self.reading = reading
        self.evaluate = evaluate
        self.replies: dict[tuple[str, str], str] = {}

    def pairings(
        self, players: list[str], support: Mapping[SupportRole, str], instance: Instance, cross_play: bool
    ) -> list[tuple[str, str]]:
        """Every unordered pair of distinct players once; both orders are judged inside the episode."""
        return [(a, b) for index, a in enumerate(players) for b in players[index + 1 :]]

    def prepare(self, run: RunView) -> None:
        """The scripts every target answered, and the answers, from this run's evaluate episodes."""
        answers = run.messages(speaker="player", finished_only=True, instance_prefix="evaluate/")
        self.replies = {(m.instance_id, m.player): m.text for m in answers}
        answered = {instance_id for instance_id, _ in self.replies}
        self._instances = [
            CompareInstance(id=f"compare/{s.id}", script=s)
            for s in self.evaluate.scripts
            if f"evaluate/{s.id}" in answered
        ]

    async def play(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        assert isinstance(instance, CompareInstance)
        for role in ("player", "partner"):
            model = ctx.model_for(role)
            text = self.replies.get((f"evaluate/{instance.script.id}", model))
            if text is None:
                raise EpisodeFailed(f"{model} has no stored answer to script {instance.script.id}")
            ctx.record_note(f"answer:{role}", text)
        await self.judge(ctx, instance, judges, panel)

    async def judge(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        assert isinstance(instance, CompareInstance)
        script = instance.script
        first = _last_by(ctx.messages, "answer:player")
        second = _last_by(ctx.messages, "answer:partner")
        variants = [
            {
                "instruction": f"Simulate this interface and answer the user's last request.\n{script.task.summary()}",
                "input": f"{script.earlier_turns(keep)}\n\nLast request:\n{script.request}",
            }
            for keep in range(script.earlier_turn_count(), -1, -1)
        ]
        label = pair_label(ctx.model_for("player"), ctx.model_for("partner"))
        if ctx.likelihood_template is not None:
            ctx.metadata["judging"] = f"likelihood ({self.reading.name})"
            answers = {"response_a": first.text.strip() or "(empty reply)"}
            answers["response_b"] = second.text.strip() or "(empty reply)"
            shown = [{"context": f"{v['instruction']}\n{v['input']}", **answers} for v in variants]
            readings = await asyncio.gather(*(self._read_pair(ctx, shown, judge, panel, first.idx) for judge in judges))
            by_judge = dict(zip(judges, readings, strict=True))
            ctx.scores.extend(read_pair_scores(by_judge, panel=panel, player=label))
            return
        verdicts = await asyncio.gather(
            *(
                judge_pair(
                    ctx,
                    self.template,
                    variants[0],
                    first.text.strip() or "(empty reply)",
                    second.text.strip() or "(empty reply)",
                    judge_model=judge,
                    panel=panel,
                    target_idx=first.idx,
                    shorter=variants[1:],
                )
                for judge in judges
            )
        )
        ctx.scores.extend(pair_scores(list(verdicts), panel=panel, player=label))

    async def _read_pair(
        self, ctx: EpisodeContext, shown: list[dict[str, str]], judge: str, panel: str, target: int
    ) -> dict[str, float] | None:
        """One judge's features of the pair, with the fewest earlier turns dropped that fit its context;
        one judgment row per feature (None, and one unparsed row, when not even the last request fits)."""

        async def read(variables: dict[str, str]) -> dict[str, float]:
            needed = None if ctx.calibrated_features is None else ctx.calibrated_features.get(judge)
            return await pair_reading(ctx.client, self.reading, variables, judge, f"pair-{judge}", needed)

        features, failure = await first_that_fits(read, shown[0], shown[1:])
        finite = {k: v for k, v in (features or {}).items() if math.isfinite(v)} or None
        for name in sorted(finite or {PREFERENCE: math.nan}):
            ctx.judgments.append(
                JudgmentRecord(
                    panel=panel,
                    judge=judge,
                    mode=self.reading.mode,
                    template=self.reading.name,
                    target_idx=target,
                    criterion=name,
                    score=None if finite is None else finite[name],
                    raw_text=json.dumps(finite) if finite is not None else failure or "no finite feature",
                    parsed=finite is not None,
                )
            )
        return finite


def _last_by(messages: list[MessageRecord], speaker: str) -> MessageRecord:
    found = [message for message in messages if message.speaker == speaker]
    if not found:
        raise EpisodeFailed(f"the transcript has no message from '{speaker}'")
    return found[-1]
