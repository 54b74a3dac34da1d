"""Scoring requests, the part every backend shares: which logits to read, and what to keep of them.

A scoring request is prefilled like any prompt, with its continuation appended; the logits of the
last prompt position and of every continuation position but the last give the continuation's
token log-probabilities, and the logits after the whole text give the choices'. Backends decide
how the prefill is batched and shared; `ScoringPlan` only turns logits rows into `TokenScores`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from appliance.engine.chat_format import render_with_tokenizer
from appliance.engine.types import Completion, GenerationRequest, ScoringRequest, TokenScores


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Natural-log probabilities of one logits row, in float64 (the normaliser sums the whole vocabulary)."""
    values = logits.astype(np.float64, copy=False)
    shifted = values - values.max()
    result: np.ndarray = shifted - np.log(np.exp(shifted).sum())
    return result


def log_softmax_at(logits: np.ndarray, indices: list[int]) -> list[float]:
    """`log_softmax(logits)[indices]`, the same float64 numbers, without writing out the whole normalised
    row: a scoring request reads one or a few entries of a row as wide as the vocabulary (Gemma's 262k).

    Three passes over the row, not five: the peak is found in float32 (widening is exact and keeps the order),
    and the subtraction itself widens, into the one float64 array the exponentials then fill."""
    peak = np.float64(logits.max())
    shifted = np.subtract(logits, peak, dtype=np.float64)
    log_total = np.log(np.exp(shifted, out=shifted).sum())
    return [float((np.float64(logits[index]) - peak) - log_total) for index in indices]


class ScoringError(ValueError):
    """A scoring request this model cannot answer (an empty prompt, a choice that is not one token)."""


@dataclass
class ScoringPlan:
    """One scoring request in token form, and the log-probabilities read so far."""

    tokens: list[int]
    prompt_length: int
    choices: list[int]
    token_logprobs: list[float] = field(default_factory=list)
    choice_logprobs: list[float] = field(default_factory=list)

    @classmethod
    def build(
        cls, prompt: list[int], continuation: list[int], choices: list[list[int]], request: ScoringRequest
    ) -> ScoringPlan:
        """`choices`: each choice's tokens; every one must be a single token."""
        if not prompt:
            raise ScoringError("a scoring request needs at least one prompt token to condition on")
        for text, tokens in zip(request.choices, choices, strict=True):
            if len(tokens) != 1:
                raise ScoringError(f"choice {text!r} is {len(tokens)} tokens for this model, not one")
        return cls(tokens=prompt + continuation, prompt_length=len(prompt), choices=[t[0] for t in choices])

    @property
    def first_read(self) -> int:
        """The first position whose logits are needed: the last prompt token."""
        return self.prompt_length - 1

    def wants(self, position: int) -> bool:
        """Whether the logits computed at `position` are read."""
        last = len(self.tokens) - 1
        return self.first_read <= position < last or (position == last and bool(self.choices))

    def read(self, position: int, logits: np.ndarray) -> None:
        """Record what the logits at `position` say about the next token (or the choices, at the end)."""
        if position + 1 < len(self.tokens):
            self.token_logprobs += log_softmax_at(logits, [self.tokens[position + 1]])
        else:
            self.choice_logprobs = log_softmax_at(logits, self.choices)

    def result(self) -> TokenScores:
        return TokenScores(token_logprobs=tuple(self.token_logprobs), choice_logprobs=tuple(self.choice_logprobs))


def plan_for_request(tokenizer: Any, use_template: bool, request: GenerationRequest) -> ScoringPlan:
    """The scoring plan of a request for a backend with a Hugging Face tokenizer (transformers, vLLM):
    a raw prompt is tokenised with its special tokens, a chat as the tokenizer's template renders it."""
    assert request.scoring is not None
    if request.prompt is not None:
        return plan_with_tokenizer(tokenizer, request.prompt, True, request.scoring)
    text = render_with_tokenizer(tokenizer, use_template, request)[0]
    return plan_with_tokenizer(tokenizer, text, not use_template, request.scoring)


def plan_with_tokenizer(tokenizer: Any, text: str, add_special_tokens: bool, scoring: ScoringRequest) -> ScoringPlan:
    """A scoring plan from a Hugging Face tokenizer and already rendered text."""
    prompt = list(tokenizer.encode(text, add_special_tokens=add_special_tokens))
    continuation = list(tokenizer.encode(scoring.continuation, add_special_tokens=False))
    choices = [list(tokenizer.encode(choice, add_special_tokens=False)) for choice in scoring.choices]
    return ScoringPlan.build(prompt, continuation, choices, scoring)


def scored_completion(plan: ScoringPlan, submitted: float, cached: int = 0) -> Completion:
    """A scoring request's answer; `cached`: its prompt tokens served by a cache (the counters add them up)."""
    return Completion(
        text="",
        finish_reason="stop",
        prompt_tokens=len(plan.tokens),
        cached_prompt_tokens=cached,
        completion_tokens=0,
        latency_s=time.perf_counter() - submitted,
        scores=plan.result(),
    )


def refused_scoring(model: str, error: ScoringError, submitted: float) -> Completion:
    return Completion(
        text="",
        finish_reason="error",
        prompt_tokens=0,
        completion_tokens=0,
        latency_s=time.perf_counter() - submitted,
        error=f"model '{model}': {error}",
    )
