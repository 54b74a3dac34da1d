"""Templates of judges that read a model's probabilities instead of sampling a verdict.

A sampled 1-10 rating from a 135M model is noise (it gives nearly every text the same number),
but the same model's token probabilities carry signal. Two template modes, both prefill only:

- `likelihood`: features of one response in its context. `logprob`: mean log-probability per
  token of the response after the context; `prior`: the same without the context; `pmi`: their
  difference summed over the response (how much the context explains it); `followup`: how much
  likelier the positive follow-up utterances are than the negative ones right after the response
  (the FED metric's idea; our own utterances), with the positive and negative means apart; with a
  `baseline_prompt`, the same difference right after the conversation without the response
  (`followup_baseline`) and the response's own effect (`followup_gain`); with `each_followup`,
  every follow-up alone too (`positive_1`.., `negative_1`..: which ones tell is learnt by the
  calibration); `tokens`: the response's length in tokens.
- `expected`: the probability-weighted score over the scale's digit tokens after a rating prompt,
  and the entropy of that distribution (G-Eval's idea, for models capable of rating).

The requests are made by `judging/scoring.py`; features are stored with the verdict and a
calibration combines them (`calibration/features.py`).
Pairwise items use the difference of the two responses' features (order cannot matter here).
"""

from __future__ import annotations

import hashlib
import math
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

LOGPROB, PRIOR, PMI, FOLLOWUP, TOKENS = "logprob", "prior", "pmi", "followup", "tokens"
POSITIVE, NEGATIVE = "followup_positive", "followup_negative"
BASELINE, GAIN = "followup_baseline", "followup_gain"
#: prefixes of the per-follow-up features of a template with `each_followup` (numbered from 1)
EACH_POSITIVE, EACH_NEGATIVE = "positive_", "negative_"
EXPECTED, ENTROPY = "expected", "entropy"
#: a pair's direct comparison read in both orders (`comparison_prompt`): the first response's lean
#: (log P(A) - log P(B) with it shown as A, minus the same with it shown as B, halved), and the lean
#: towards slot A whatever is shown there (the two orders' mean: the judge's position bias)
PREFERENCE, POSITION_LEAN = "preference", "position_lean"
#: bump when `judging/scoring.py` computes a feature differently: cached features are then recomputed
FEATURE_CODE = "features-2"
#: the context a likelihood judge reads is cut to its last lines within this many characters
DEFAULT_CONTEXT_CHARS = 1500


class _ScoringTemplateBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    #: what the feature that stands for the whole verdict is (shown raw, before calibration)
    summary: str

    #: fields added after calibrations were shipped: left out of the fingerprint while at their default,
    #: so a template that does not use them keeps the fingerprint its shipped calibrations name
    added_later: ClassVar[frozenset[str]] = frozenset()

    def fingerprint(self) -> str:
        """Identifies prompts, word lists and how features are computed: stored features are reused only
        for the same template and feature code."""
        defaults = {name for name in self.added_later if getattr(self, name) == type(self).model_fields[name].default}
        dumped = self.model_dump_json(exclude=defaults or None)
        return hashlib.sha256((dumped + FEATURE_CODE).encode()).hexdigest()[:16]

    def outputs(self) -> list[str]:
        raise NotImplementedError

    def summary_score(self, features: dict[str, float]) -> float:
        return features[self.summary]


class LikelihoodTemplate(_ScoringTemplateBase):
    """Likelihood features of a response (turn items) or of a whole dialogue's continuation."""

    mode: Literal["likelihood"] = "likelihood"
    summary: str = FOLLOWUP
    #: the speaker label of the scored response, and of the other side
    speaker: str = "System"
    user: str = "User"
    #: conditional score: `prompt` then `continuation` (empty: no logprob / prior / pmi features)
    prompt: str = ""
    continuation: str = ""
    #: the continuation scored without the context (PMI's denominator)
    prior_prompt: str = ""
    #: the follow-ups are scored after this prompt
    followup_prompt: str
    #: and, if set, after this one too (the conversation without the response): how much the response
    #: itself moves the follow-ups, apart from the conversation's own mood
    baseline_prompt: str = ""
    positive: list[str] = Field(min_length=1)
    negative: list[str] = Field(min_length=1)
    max_context_chars: int = Field(default=DEFAULT_CONTEXT_CHARS, ge=100)
    #: each follow-up's mean log-probability after the response is a feature of its own too
    #: (`positive_1`..., `negative_1`...): a calibration then learns which follow-ups tell most
    each_followup: bool = False
    #: pairs only: a prompt that shows both responses ({response_a}, {response_b}) and ends where the
    #: judge names the better one; the probabilities of `comparison_choices` there, asked in both
    #: orders, give the `preference` and `position_lean` features beside the feature differences
    comparison_prompt: str = ""
    comparison_choices: tuple[str, str] = (" A", " B")
    added_later: ClassVar[frozenset[str]] = frozenset({"each_followup", "comparison_prompt", "comparison_choices"})

    @model_validator(mode="after")
    def _check(self) -> LikelihoodTemplate:
        if bool(self.prompt) != bool(self.continuation):
            raise ValueError("prompt and continuation go together (both set or both empty)")
        if self.prior_prompt and not self.continuation:
            raise ValueError("prior_prompt needs a continuation to score")
        if self.summary not in self.outputs():
            raise ValueError(f"summary '{self.summary}' is not one of the features: {', '.join(self.outputs())}")
        return self

    def outputs(self) -> list[str]:
        features = [LOGPROB, TOKENS] if self.continuation else []
        if self.prior_prompt:
            features += [PRIOR, PMI]
        features += [FOLLOWUP, POSITIVE, NEGATIVE]
        if self.each_followup:
            features += [f"{EACH_POSITIVE}{i}" for i in range(1, len(self.positive) + 1)]
            features += [f"{EACH_NEGATIVE}{i}" for i in range(1, len(self.negative) + 1)]
        features += [PREFERENCE, POSITION_LEAN] if self.comparison_prompt else []
        return features + ([BASELINE, GAIN] if self.baseline_prompt else [])


class ExpectedScoreTemplate(_ScoringTemplateBase):
    """The probability-weighted rating after a prompt that ends where the score's digit goes."""

    mode: Literal["expected"] = "expected"
    summary: str = EXPECTED
    prompt: str
    scale_min: int = Field(default=1, ge=0, le=9)
    scale_max: int = Field(default=5, ge=0, le=9)
    #: put before each digit (" " when the prompt ends with "Score:")
    choice_prefix: str = ""
    speaker: str = "System"
    user: str = "User"
    max_context_chars: int = Field(default=DEFAULT_CONTEXT_CHARS, ge=100)

    @model_validator(mode="after")
    def _check(self) -> ExpectedScoreTemplate:
        if self.scale_min >= self.scale_max:
            raise ValueError("scale_min must be below scale_max (single digits)")
        return self

    def outputs(self) -> list[str]:
        return [EXPECTED, ENTROPY]

    def choices(self) -> tuple[str, ...]:
        return tuple(f"{self.choice_prefix}{digit}" for digit in range(self.scale_min, self.scale_max + 1))


ScoringTemplate = LikelihoodTemplate | ExpectedScoreTemplate


def tail_lines(text: str, limit: int) -> str:
    """The last whole lines of `text` within `limit` characters (at least the last line, cut)."""
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        if kept and size + len(line) + 1 > limit:
            break
        kept.append(line)
        size += len(line) + 1
    joined = "\n".join(reversed(kept))
    return joined[-limit:]


def scoring_variables(template: ScoringTemplate, variables: dict[str, str]) -> dict[str, str]:
    """Fill defaults: speaker names, the context cut to its tail, the response without its speaker tag."""
    speaker = variables.get("speaker") or template.speaker
    filled = {"speaker": speaker, "user": variables.get("user") or template.user, **variables}
    filled["speaker"] = speaker
    for key in ("context", "dialogue"):
        if key in filled:
            filled[key] = tail_lines(filled[key].strip(), template.max_context_chars)
    response = filled.get("response", "").strip()
    tag = f"{speaker}:"
    filled["response"] = response[len(tag) :].strip() if response.startswith(tag) else response
    return filled


def scale_distribution(logprobs: list[float]) -> list[float]:
    """Log-probabilities of a scale's values, renormalised into probabilities over the scale."""
    top = max(logprobs)
    weights = [math.exp(value - top) for value in logprobs]
    total = sum(weights)
    return [w / total for w in weights]


def expected_score(choice_logprobs: list[float], scale_min: int) -> dict[str, float]:
    """The distribution over the scale's values, renormalised: its mean and entropy (nats)."""
    probabilities = scale_distribution(choice_logprobs)
    expected = sum((scale_min + i) * p for i, p in enumerate(probabilities))
    entropy = -sum(p * math.log(p) for p in probabilities if p > 0)
    return {EXPECTED: expected, ENTROPY: entropy}


def pair_features(first: dict[str, float], second: dict[str, float]) -> dict[str, float]:
    """A pair's features: the first response's minus the second's (positive: the first looks better)."""
    return {key: first[key] - second[key] for key in first if key in second}
