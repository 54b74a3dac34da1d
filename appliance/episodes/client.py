"""Seeded requests to the models bound to roles: what runs, rescoring and calibration share.

A client binds role names to models and sampling, derives every request's seed from its own seed,
its key and a request counter (so results do not depend on scheduling order), and keys each role's
conversation so that its KV cache is reused between turns. It records nothing: an episode's
transcript is `EpisodeContext`'s job.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from appliance.catalog.sampling import Sampling
from appliance.engine.types import (
    Completion,
    GenerationRequest,
    Message,
    ResolvedSampling,
    ScoredText,
    ScoringRequest,
    TokenScores,
)
from appliance.episodes.scheduler import Scheduler


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


class EpisodeFailed(Exception):
    """An episode cannot go on (e.g. its context overflowed); it is stored with this error."""


class ContextFull(EpisodeFailed):
    """The prompt no longer fits the model's context. A conversation may end here on purpose and keep
    the turns it played; uncaught, the episode fails with this error."""


@dataclass
class ModelClient:
    #: names this client's conversations (an episode id, a label item): KV cache keys start with it
    key: str
    seed: int
    scheduler: Scheduler
    roles: dict[str, RoleBinding]
    #: every request decoded greedily (benchmarks compare transcripts at temperature 0)
    force_greedy: bool = False
    #: what request seeds derive from besides `seed` (default: `key`): an episode's identity without
    #: the run id, so two runs with the same seed sample the same
    seed_key: str = ""
    #: no reply longer than this many tokens, whatever the method asks (the quick suite's cap); a judge's
    #: verdict is the instrument's reading, not a reply, and keeps the method's cap
    max_reply_tokens: int | None = None
    _request_count: int = 0

    def model_for(self, role: str) -> str:
        """The model bound to `role`; a role played by several models is bound as `role:model`."""
        return self.roles[role].model

    def binding(self, role: str, model: str | None = None) -> RoleBinding:
        """`role`'s binding, or that of `model`'s seat where several models play the role."""
        return self.roles[f"{role}:{model}" if model is not None else role]

    def count_tokens(self, role: str, text: str, *, model: str | None = None) -> int:
        """`text`'s length in the tokens of the model bound to `role` (or `model`)."""
        return self.scheduler.count_tokens(self.binding(role, model).model, text)

    async def generate(
        self,
        role: str,
        messages: Sequence[Message],
        *,
        sampling: Sampling | None = None,
        grammar: str | None = None,
        model: str | None = None,
        conversation: str | None = None,
        reserve_output: bool = False,
    ) -> Completion:
        """Ask the model bound to `role` (or `model`) for the next message.

        `sampling` is the episode's own layer (e.g. the method's per-role
        defaults); the model's per-role overrides from models.toml win over it.
        """
        binding = self.binding(role, model)
        target = binding.model
        self._request_count += 1
        identity = self.seed_key or self.key
        seed_layer = Sampling(seed=derive_seed(self.seed, identity, role, target, self._request_count))
        greedy = Sampling(temperature=0.0) if self.force_greedy else None
        layers = (binding.model_sampling, sampling, binding.role_override, greedy)
        resolved = ResolvedSampling.from_layers(seed_layer, *judge_clean_layers(role, *layers))
        if self.max_reply_tokens is not None and role != JUDGE_ROLE and resolved.max_tokens > self.max_reply_tokens:
            resolved = resolved.model_copy(update={"max_tokens": self.max_reply_tokens})
        request = GenerationRequest(
            messages=tuple(messages),
            sampling=resolved,
            grammar=grammar,
            conversation_key=f"{self.key}/{conversation or role}/{target}",
            reserve_output=reserve_output,
        )
        completion = await self.scheduler.generate(target, request)
        if completion.finish_reason == "context_overflow":
            raise ContextFull(completion.error or "context overflow")
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
        extends: ScoredText | None = None,
    ) -> TokenScores:
        """Log-probabilities from the model bound to `role` (or `model`): prefill only, nothing recorded.

        `prompt` is raw text (control tokens parsed), so a likelihood judge sees exactly its template;
        or messages, formatted by the model's chat format (the continuation is then the reply's start).
        `extends`: another scoring request whose whole text `prompt` begins with (see ScoringRequest).
        A prompt that does not fit, or a choice that is not one token, fails the episode.
        """
        target = self.binding(role, model).model
        request = GenerationRequest(
            prompt=prompt if isinstance(prompt, str) else None,
            messages=() if isinstance(prompt, str) else tuple(prompt),
            scoring=ScoringRequest(continuation=continuation, choices=choices, extends=extends),
            conversation_key=f"{self.key}/{conversation or role}/{target}",
        )
        completion = await self.scheduler.generate(target, request)
        if completion.scores is None:
            raise EpisodeFailed(completion.error or f"model '{target}' returned no scores")
        return completion.scores


#: the role whose requests are the instrument's verdicts
JUDGE_ROLE = "judge"


def judge_clean_layers(
    role: str, model: Sampling, method: Sampling | None, role_override: Sampling, greedy: Sampling | None
) -> tuple[Sampling | None, ...]:
    """The sampling layers, lowest first, with the model's default repeat penalty dropped from a judge's
    requests and from greedy ones: a penalty that pushes away tokens already seen bends a verdict, and
    a greedy reply (the method asked for the single likeliest text) alike. A penalty the method asks
    for, or the entry sets for this very role, stays."""
    greedy_request = ResolvedSampling.from_layers(model, method, role_override, greedy).temperature <= 0.0
    if (role == JUDGE_ROLE or greedy_request) and model.repeat_penalty is not None:
        model = model.model_copy(update={"repeat_penalty": None})
    return model, method, role_override, greedy
