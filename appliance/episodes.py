"""What an episode sees: `ctx.generate(role, messages)` and nothing of batching.

An episode is straight-line async code. The context binds evaluation roles
(player, interrogator, judge, ...) to models and sampling, derives a seed for
every request from the run seed (so results do not depend on scheduling
order), keys each role's conversation so its KV cache is reused between
turns, and records every message and verdict for the store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from appliance.engine.types import (
    Completion,
    GenerationRequest,
    Message,
    ResolvedSampling,
    Sampling,
    ScoringRequest,
    TokenScores,
)
from appliance.scheduler import Scheduler
from appliance.store.records import JudgmentRecord, MessageRecord, ScoreRecord


@dataclass(frozen=True)
class RoleBinding:
    """Which model plays a role.

    Sampling precedence, lowest first: the model's `sampling` from models.toml,
    the method's defaults for the role (passed by the episode), then the
    model's `roles.<role>` override from models.toml.
    """

    model: str
    model_sampling: Sampling = field(default_factory=Sampling)
    role_override: Sampling = field(default_factory=Sampling)


def derive_seed(*parts: object) -> int:
    digest = hashlib.sha256("/".join(str(part) for part in parts).encode()).digest()
    return int.from_bytes(digest[:4], "big")


def pair_label(player: str, partner: str) -> str:
    """How reports name who played: a model in self-play, "A--B" when B took the partner roles (clembench's naming)."""
    return player if player == partner else f"{player}--{partner}"


def table_label(table: tuple[str, ...]) -> str:
    """How reports name an N-player game in which every model of `table` sat: "A+B+C"."""
    return "+".join(table)


def table_role(model: str) -> str:
    """The episode role of `model`'s seat in an N-player game."""
    return f"table:{model}"


class EpisodeFailed(Exception):
    """An episode cannot go on (e.g. its context overflowed); it is stored with this error."""


@dataclass
class EpisodeContext:
    episode_id: str
    seed: int
    scheduler: Scheduler
    roles: dict[str, RoleBinding]
    #: every request decoded greedily (benchmarks compare transcripts at temperature 0)
    force_greedy: bool = False
    #: a cap on conversation turns that families with turn counts respect
    max_turns: int | None = None
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
    _request_count: int = 0

    def model_for(self, role: str) -> str:
        """The model bound to `role`; a role played by several models is bound as `role:model`."""
        return self.roles[role].model

    def count_tokens(self, role: str, text: str) -> int:
        """`text`'s length in the tokens of the model bound to `role`."""
        return self.scheduler.count_tokens(self.model_for(role), text)

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
        """Ask the model bound to `role` (or `model`) for the next message.

        `sampling` is the episode's own layer (e.g. the method's per-role
        defaults); the model's per-role overrides from models.toml win over it.
        """
        binding = self.roles[f"{role}:{model}" if model is not None else role]
        target = binding.model
        self._request_count += 1
        identity = self.seed_key or self.episode_id
        seed_layer = Sampling(seed=derive_seed(self.seed, identity, role, target, self._request_count))
        greedy = Sampling(temperature=0.0) if self.force_greedy else None
        resolved = ResolvedSampling.from_layers(
            seed_layer, binding.model_sampling, sampling, binding.role_override, greedy
        )
        request = GenerationRequest(
            messages=tuple(messages),
            sampling=resolved,
            grammar=grammar,
            conversation_key=f"{self.episode_id}/{conversation or role}/{target}",
            reserve_output=reserve_output,
        )
        completion = await self.scheduler.generate(target, request)
        if completion.finish_reason == "context_overflow":
            raise EpisodeFailed(completion.error or "context overflow")
        if record:
            self.record_message(role, target, completion)
        return completion

    async def score(
        self,
        role: str,
        prompt: str | Sequence[Message],
        *,
        continuation: str = "",
        choices: tuple[str, ...] = (),
        model: str | None = None,
        conversation: str | None = None,
    ) -> TokenScores:
        """Log-probabilities from the model bound to `role` (or `model`): prefill only, nothing recorded.

        `prompt` is raw text (control tokens parsed), so a likelihood judge sees exactly its template;
        or messages, formatted by the model's chat format (the continuation is then the reply's start).
        A prompt that does not fit, or a choice that is not one token, fails the episode.
        """
        target = self.roles[f"{role}:{model}" if model is not None else role].model
        request = GenerationRequest(
            prompt=prompt if isinstance(prompt, str) else None,
            messages=() if isinstance(prompt, str) else tuple(prompt),
            scoring=ScoringRequest(continuation=continuation, choices=choices),
            conversation_key=f"{self.episode_id}/{conversation or role}/{target}",
        )
        completion = await self.scheduler.generate(target, request)
        if completion.scores is None:
            raise EpisodeFailed(completion.error or f"model '{target}' returned no scores")
        return completion.scores

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
