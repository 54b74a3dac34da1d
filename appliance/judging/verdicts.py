"""Asking a judge: render its template, decode under its grammar, parse, record.

Raw text is always kept; a reply that does not parse is recorded with
`parsed=False` and no score, never dropped. Pairwise judging asks both
orders, because small judges favour a position: a response wins only if it
wins in both orders.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from appliance.catalog.sampling import Sampling
from appliance.engine.types import Message
from appliance.episodes.client import ModelClient
from appliance.episodes.context import EpisodeContext
from appliance.judging.expected_rating import read_roles, read_verdict
from appliance.judging.fitting import first_that_fits
from appliance.judging.templates import (
    PREFERENCE,
    RATING,
    PairwiseTemplate,
    RatingTemplate,
    RolesTemplate,
    SampledTemplate,
    YesNoTemplate,
    judge_messages,
)
from appliance.store.records import JudgmentRecord

PairOutcome = Literal["first", "second", "tie", "inconsistent", "unparsed"]


def verdict_records(
    texts: list[str],
    template: SampledTemplate,
    *,
    panel: str,
    judge: str,
    target_idx: int,
    order_swapped: bool = False,
) -> list[JudgmentRecord]:
    """One row per output of the template (the mean over samples); if no sample parses, rows with no score."""
    verdict = template.parse_samples(texts)
    text = "\n".join(texts)
    return [
        JudgmentRecord(
            panel=panel,
            judge=judge,
            mode=template.mode,
            template=template.name,
            target_idx=target_idx,
            criterion=output,
            score=None if verdict is None else verdict[output],
            raw_text=text,
            parsed=verdict is not None,
            order_swapped=order_swapped,
        )
        for output in template.outputs()
    ]


async def judge_replies(
    client: ModelClient,
    template: SampledTemplate,
    variables: dict[str, str],
    judge_model: str,
    conversation: str,
    *,
    reserve_output: bool = False,
) -> list[str]:
    """The judge's raw replies (`template.samples` of them), decoded under the template's grammar.

    Samples go out together with the same prompt, so the engine prefills it once and forks it.
    `reserve_output`: a prompt that leaves no room for the verdict raises `EpisodeFailed` (see
    `GenerationRequest.reserve_output`), so the caller can shorten it.
    """
    sampling = Sampling(temperature=template.temperature, max_tokens=template.max_tokens)
    messages = judge_messages(template, variables)
    grammar = template.grammar()
    return await _sample(client, template, messages, sampling, grammar, judge_model, conversation, reserve_output)


async def _sample(
    client: ModelClient,
    template: SampledTemplate | RolesTemplate,
    messages: list[Message],
    sampling: Sampling,
    grammar: str,
    judge_model: str,
    conversation: str,
    reserve_output: bool = False,
) -> list[str]:
    """`template.samples` replies to one prompt; they go out together, so the engine prefills it once."""
    completions = await asyncio.gather(
        *(
            client.generate(
                "judge",
                messages,
                sampling=sampling,
                grammar=grammar,
                model=judge_model,
                conversation=f"{conversation}-s{sample}",
                reserve_output=reserve_output,
            )
            for sample in range(template.samples)
        )
    )
    return [completion.text for completion in completions]


async def ask_judge(
    ctx: EpisodeContext,
    template: SampledTemplate,
    variables: dict[str, str],
    *,
    judge_model: str,
    panel: str,
    target_idx: int,
    order_swapped: bool = False,
    shorter: Sequence[dict[str, str]] | None = None,
) -> list[JudgmentRecord]:
    """One verdict of one judge; the records are also added to the episode.

    Under a panel that reads probabilities, a rating, a yes/no check or a preference is read, not
    sampled (`expected_rating.py`).

    `shorter` (a list, possibly empty): the prompt must leave room for the verdict in the judge's
    context, and these variables (the same with less history) are tried in order when it does not.
    The fit is measured by the engine with the judge's own tokenizer; when nothing fits, the verdict
    is stored unparsed with the engine's message. None: no such check (an overflow fails the episode).
    """
    if ctx.likelihood_template is not None and isinstance(template, RatingTemplate | YesNoTemplate | PairwiseTemplate):
        return await read_verdict(
            ctx,
            template,
            variables,
            judge_model=judge_model,
            panel=panel,
            target_idx=target_idx,
            order_swapped=order_swapped,
            shorter=shorter,
        )
    conversation = f"judge-{target_idx}-{int(order_swapped)}"
    replies, failure = await first_that_fits(
        lambda filled: judge_replies(
            ctx.client, template, filled, judge_model, conversation, reserve_output=shorter is not None
        ),
        variables,
        shorter,
    )
    texts = replies if replies is not None else [failure]
    records = verdict_records(
        texts, template, panel=panel, judge=judge_model, target_idx=target_idx, order_swapped=order_swapped
    )
    ctx.judgments.extend(records)
    return records


async def ask_roles(
    ctx: EpisodeContext,
    template: RolesTemplate,
    variables: dict[str, str],
    targets: Mapping[str, int],
    *,
    judge_model: str,
    panel: str,
) -> dict[str, float | None]:
    """One judge rates every role of `targets` (role -> the index of its last message) in one call;
    one record per role is added to the episode. Under a panel that reads probabilities, the scores
    are read role by role (`read_roles`), not sampled."""
    roles = list(targets)
    if ctx.likelihood_template is not None:
        return await read_roles(ctx, template, variables, targets, judge_model=judge_model, panel=panel)
    sampling = Sampling(temperature=template.temperature, max_tokens=template.budget(len(roles)))
    messages = judge_messages(template, variables)
    texts = await _sample(ctx.client, template, messages, sampling, template.grammar(roles), judge_model, "judge-roles")
    verdict = template.parse_role_samples(texts, roles)
    ctx.judgments.extend(
        JudgmentRecord(
            panel=panel,
            judge=judge_model,
            mode=template.mode,
            template=template.name,
            target_idx=targets[role],
            criterion=RATING,
            score=None if verdict is None else verdict[role],
            raw_text="\n".join(texts),
            parsed=verdict is not None,
        )
        for role in roles
    )
    return {role: None if verdict is None else verdict[role] for role in roles}


@dataclass(frozen=True)
class PairVerdict:
    """Both orders of one judge on one pair, from the first response's point of view."""

    judge: str
    original: float | None  # +1 first better, -1 second better, 0 tie (first shown as A)
    swapped: float | None  # the same, asked with the second shown as A

    @property
    def outcome(self) -> PairOutcome:
        return combine_orders(self.original, self.swapped)

    @property
    def position_biased(self) -> bool:
        """The judge picked the same position (A twice or B twice) whatever it held."""
        return self.original is not None and self.swapped is not None and self.original == -self.swapped != 0


def combine_orders(original: float | None, swapped: float | None) -> PairOutcome:
    """A win needs both orders; equal ties are a tie; any other pair of verdicts is inconsistent."""
    if original is None or swapped is None:
        return "unparsed"
    if original == swapped == 1.0:
        return "first"
    if original == swapped == -1.0:
        return "second"
    if original == swapped == 0.0:
        return "tie"
    return "inconsistent"


def in_order(variables: dict[str, str], first: str, second: str, *, swapped: bool) -> dict[str, str]:
    """The pairwise template's variables with the first response shown as A, or as B when swapped."""
    a, b = (second, first) if swapped else (first, second)
    return {**variables, "response_a": a, "response_b": b}


async def judge_pair(
    ctx: EpisodeContext,
    template: PairwiseTemplate,
    variables: dict[str, str],
    first: str,
    second: str,
    *,
    judge_model: str,
    panel: str,
    target_idx: int,
    shorter: Sequence[dict[str, str]] | None = None,
) -> PairVerdict:
    """Ask one judge both orders at once (batched); `swapped` is re-expressed for the first response."""
    original, swapped = await asyncio.gather(
        *(
            ask_judge(
                ctx,
                template,
                in_order(variables, first, second, swapped=order),
                judge_model=judge_model,
                panel=panel,
                target_idx=target_idx,
                order_swapped=order,
                shorter=None if shorter is None else [in_order(v, first, second, swapped=order) for v in shorter],
            )
            for order in (False, True)
        )
    )
    return PairVerdict(judge_model, _preference(original), _flip(_preference(swapped)))


def _preference(records: list[JudgmentRecord]) -> float | None:
    return next((r.score for r in records if r.criterion == PREFERENCE and r.parsed), None)


def _flip(value: float | None) -> float | None:
    return None if value is None else -value
