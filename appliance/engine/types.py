"""The one request type and the one completion type shared by every backend."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from appliance.catalog.sampling import Sampling


class Message(BaseModel):
    """One chat message; `role` is the chat-template role, not the evaluation role."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class ResolvedSampling(BaseModel):
    """Sampling with every field decided, as a backend consumes it."""

    model_config = ConfigDict(frozen=True)

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    max_tokens: int = 128
    stop: tuple[str, ...] = ()
    seed: int = 0
    ignore_eos: bool = False  # benchmarks: always generate max_tokens

    @classmethod
    def from_layers(cls, *layers: Sampling | None) -> ResolvedSampling:
        merged = Sampling().merged(*layers)
        values = {key: value for key, value in merged.model_dump().items() if value is not None}
        if "stop" in values:
            values["stop"] = tuple(values["stop"])
        return cls(**values)


class ScoredText(BaseModel):
    """A raw-text prompt and the continuation scored after it (another request's whole text)."""

    model_config = ConfigDict(frozen=True)

    prompt: str
    continuation: str = ""


class ScoringRequest(BaseModel):
    """Prefill only, nothing generated: what the model's probabilities say about given text.

    `continuation`: text whose tokens are scored one by one after the prompt (log p of each token
    given everything before it). `choices`: candidate next tokens after prompt + continuation, each
    exactly one token of the model's vocabulary; their log-probabilities come from the full softmax.
    `extends`: a scoring request whose whole text this prompt begins with (a reply's follow-ups
    extend the request that scores the reply). An engine that cuts prefills at fixed places cuts
    this one where it cuts that one too, so whichever runs first leaves a cache the other reuses
    whole; the numbers do not depend on which ran first.
    """

    model_config = ConfigDict(frozen=True)

    continuation: str = ""
    choices: tuple[str, ...] = ()
    extends: ScoredText | None = None


class TokenScores(BaseModel):
    """What a scoring request returns: natural-log probabilities over the whole vocabulary."""

    model_config = ConfigDict(frozen=True)

    #: one per continuation token, in order
    token_logprobs: tuple[float, ...] = ()
    #: one per choice, in the request's order
    choice_logprobs: tuple[float, ...] = ()

    @property
    def total(self) -> float:
        return float(sum(self.token_logprobs))

    @property
    def mean(self) -> float:
        """Mean log-probability per continuation token (NaN for an empty continuation)."""
        return self.total / len(self.token_logprobs) if self.token_logprobs else float("nan")


class GenerationRequest(BaseModel):
    """What an episode asks of a model.

    Either `messages` (formatted by the model's chat format) or `prompt`, a
    raw, already formatted text whose control tokens are parsed.
    `conversation_key` names the conversation this request continues, so a
    backend can keep that conversation's KV cache between turns and prefill
    only what is new.
    """

    model_config = ConfigDict(frozen=True)

    messages: tuple[Message, ...] = ()
    prompt: str | None = None
    sampling: ResolvedSampling = ResolvedSampling()
    grammar: str | None = None
    conversation_key: str | None = None
    #: the prompt must leave room for `sampling.max_tokens` in the context; a request that does not
    #: is rejected as `context_overflow` before anything is decoded (callers then shorten the prompt)
    reserve_output: bool = False
    #: set: a scoring request (prefill only; `sampling` and `grammar` are ignored)
    scoring: ScoringRequest | None = None
    #: the adapter entry this request plays, on a backend that serves a base and its adapters (set by the
    #: scheduler from the model name; None: the backend's own model)
    adapter: str | None = None


FinishReason = Literal["stop", "length", "context_overflow", "error"]


class Completion(BaseModel):
    """What a backend returns for one request."""

    model_config = ConfigDict(frozen=True)

    text: str
    finish_reason: FinishReason
    prompt_tokens: int
    cached_prompt_tokens: int = 0
    completion_tokens: int
    latency_s: float
    error: str | None = None
    #: the generated token ids (what two runs are compared by when their texts must be identical)
    token_ids: tuple[int, ...] = ()
    #: the answer to a scoring request
    scores: TokenScores | None = None

    @property
    def prefilled_tokens(self) -> int:
        """Prompt tokens that had to be computed (not found in the KV cache)."""
        return self.prompt_tokens - self.cached_prompt_tokens
