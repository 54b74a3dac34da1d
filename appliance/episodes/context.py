"""What an episode sees: `ctx.generate(role, messages)` and nothing of batching.

An episode is straight-line async code. The context binds evaluation roles
(player, interrogator, judge, ...) to models and sampling, derives a seed for
every request from the run seed (so results do not depend on scheduling
order), keys each role's conversation so its KV cache is reused between
turns, and records every message and verdict for the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from appliance.catalog.sampling import Sampling
from appliance.engine.types import Completion, Message
from appliance.episodes.client import ModelClient, RoleBinding
from appliance.episodes.scheduler import Scheduler
from appliance.store.records import EpisodeRecord, JudgmentRecord, MessageRecord, ScoreRecord


@dataclass(frozen=True)
class EpisodeKey:
    """Which episode of which run: its stored id, and the identity its request seeds derive from
    (the id without the run, so two runs with the same seed sample the same). Built from its parts,
    never parsed back from an id: scenario specs and instance ids may hold colons."""

    run_id: str
    scenario: str
    instance_id: str
    #: who played: `pair_label` or `table_label`
    label: str

    @property
    def id(self) -> str:
        return f"{self.run_id}:{self.seed_key}"

    @property
    def seed_key(self) -> str:
        return f"{self.scenario}:{self.instance_id}:{self.label}"


def imported_episode(key: EpisodeKey, at: datetime, **results: Any) -> EpisodeRecord:
    """An episode read from another system's published results: finished, as of `at`, not played here
    (seed 0, no wall time); `results` holds what the results say (metadata, judgments, scores, models)."""
    return EpisodeRecord(
        episode_id=key.id,
        run_id=key.run_id,
        scenario=key.scenario,
        instance_id=key.instance_id,
        player=key.label,
        status="finished",
        seed=0,
        started_at=at,
        finished_at=at,
        wall_s=0.0,
        **results,
    )


def pair_label(player: str, partner: str) -> str:
    """How reports name who played: a model in self-play, "A--B" when B took the partner roles (clembench's naming)."""
    return player if player == partner else f"{player}--{partner}"


def table_label(table: tuple[str, ...]) -> str:
    """How reports name an N-player game in which every model of `table` sat: "A+B+C"."""
    return "+".join(table)


def table_role(model: str) -> str:
    """The episode role of `model`'s seat in an N-player game."""
    return f"table:{model}"


@dataclass
class EpisodeContext:
    """An episode's model client, the run's options that families respect, and its transcript."""

    episode_id: str
    seed: int
    scheduler: Scheduler
    roles: dict[str, RoleBinding]
    #: every request decoded greedily (benchmarks compare transcripts at temperature 0)
    force_greedy: bool = False
    #: a cap on conversation turns that families with turn counts respect
    max_turns: int | None = None
    #: a cap on every reply's tokens, below the method's own (the quick suite's)
    max_reply_tokens: int | None = None
    #: what request seeds derive from besides the run seed: the episode's identity without the run id
    #: (family, instance, pairing), so two runs with the same seed sample the same (default: episode_id)
    seed_key: str = ""
    messages: list[MessageRecord] = field(default_factory=list)
    judgments: list[JudgmentRecord] = field(default_factory=list)
    scores: list[ScoreRecord] = field(default_factory=list)
    #: the models that all sit in this episode's N-player game (each bound as `table_role(model)`); empty otherwise
    table: tuple[str, ...] = ()
    #: leave a judge's verdicts on its own model's outputs out (the run's --exclude-self-judging)
    exclude_self_judging: bool = False
    #: facts the episode adds to its stored metadata (e.g. per-turn game scores)
    metadata: dict[str, object] = field(default_factory=dict)
    #: model-written code may run without kernel isolation (the run's --unsafe-code-execution)
    unsafe_code_execution: bool = False
    #: a likelihood panel's template (judges/NAME.toml): its judges give features, not sampled verdicts
    likelihood_template: str | None = None
    #: per judge, the only features its calibrated figures read (`calibration.apply.calibrated_features`);
    #: None: every feature is read
    calibrated_features: Mapping[str, frozenset[str]] | None = None
    client: ModelClient = field(init=False)

    def __post_init__(self) -> None:
        self.client = ModelClient(
            self.episode_id,
            self.seed,
            self.scheduler,
            self.roles,
            self.force_greedy,
            self.seed_key,
            max_reply_tokens=self.max_reply_tokens,
        )

    def model_for(self, role: str) -> str:
        """The model bound to `role`; a role played by several models is bound as `role:model`."""
        return self.client.model_for(role)

    def count_tokens(self, role: str, text: str) -> int:
        """`text`'s length in the tokens of the model bound to `role`."""
        return self.client.count_tokens(role, text)

    async def generate(
        self,
        role: str,
        messages: Sequence[Message],
        *,
        sampling: Sampling | None = None,
        grammar: str | None = None,
        model: str | None = None,
        conversation: str | None = None,
        record: bool = True,
        reserve_output: bool = False,
    ) -> Completion:
        """The client's `generate`, and the reply recorded in the transcript unless `record` is False."""
        completion = await self.client.generate(
            role,
            messages,
            sampling=sampling,
            grammar=grammar,
            model=model,
            conversation=conversation,
            reserve_output=reserve_output,
        )
        if record:
            self.record_message(role, self.client.binding(role, model).model, completion)
        return completion

    def record_note(self, speaker: str, text: str) -> None:
        """A message no model wrote (e.g. a game master's prompt), so the transcript shows both sides."""
        self.messages.append(
            MessageRecord(
                idx=len(self.messages),
                speaker=speaker,
                model="",
                text=text,
                prompt_tokens=0,
                cached_prompt_tokens=0,
                completion_tokens=0,
                latency_s=0.0,
                finish_reason="note",
            )
        )

    def record_message(self, speaker: str, model: str, completion: Completion) -> None:
        self.messages.append(
            MessageRecord(
                idx=len(self.messages),
                speaker=speaker,
                model=model,
                text=completion.text,
                prompt_tokens=completion.prompt_tokens,
                cached_prompt_tokens=completion.cached_prompt_tokens,
                completion_tokens=completion.completion_tokens,
                latency_s=completion.latency_s,
                finish_reason=completion.finish_reason,
            )
        )
