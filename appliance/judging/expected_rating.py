"""A family's judge read from its probabilities instead of sampled (under a likelihood panel).

A 135M judge asked for a 1-10 score writes nearly the same number for every reply (its
sampled verdicts carry no signal), yet the probabilities it gives each number still move
from reply to reply. Under a panel that reads probabilities (`Panel.judging = "likelihood"`),
a family's rating judge (SimulBench's ratings, DeepEval's role ratings) is therefore read,
not sampled: the judge gets the same chat-formatted prompt it would sample from, and every
verdict it could write, `{"score": n}` for each n on the scale, is scored as the reply's
continuation. The values' probabilities, renormalised over the scale, give the
probability-weighted score (G-Eval's reading) and its entropy. Scoring the whole verdict text
keeps `1}` and `10}` apart whatever the tokenizer does with digits. A template that asks
for reasoning first is read without it (the score straight away).

Yes/no checks and pairwise preferences are read the same way, over their own verdicts:
`{"answer": "yes"}` against `{"answer": "no"}` gives P(yes), stored as the verdict's score (a
panel's majority becomes a mean P(yes) above one half); `{"better": "A"}`, `"B"` and `"tie"`
give a distribution whose most probable choice is the verdict (+1, -1 or 0, so the outcome of
both orders is decided as for sampled verdicts), with P(A) - P(B) and each probability stored.

A roles verdict (DeepEval's referee rates every role of a collaboration in one call) is read role
by role: the first role's value over `{"Programmer": {"score": n}`, the next over the same object
with the first role's most probable value written in, and so on, as the judge would continue its
own verdict. The evaluation each role's score follows is not written (read without reasoning).

Prefill only: the prompt is shared by all of a verdict's requests, so the engine computes it
once and each value costs a few tokens.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence

from appliance.episodes.client import ModelClient
from appliance.episodes.context import EpisodeContext
from appliance.judging.fitting import first_that_fits
from appliance.judging.scoring_templates import EXPECTED, expected_score, scale_distribution
from appliance.judging.templates import (
    RATING,
    PairwiseTemplate,
    RatingTemplate,
    RolesTemplate,
    YesNoTemplate,
    judge_messages,
)
from appliance.store.records import JudgmentRecord

#: the `mode` of the verdict rows a read rating writes (a sampled one writes "rating")
EXPECTED_RATING_MODE = "expected"


def verdict_text(value: int) -> str:
    """What the judge would write for `value` (the template's grammar without reasoning)."""
    return f'{{"{RATING}": {value}}}'


#: the templates whose verdict can be read: every verdict they could write is a short, finite text
ReadTemplate = RatingTemplate | YesNoTemplate | PairwiseTemplate


def verdict_choices(template: ReadTemplate) -> dict[str, tuple[str, float]]:
    """Name -> (the verdict text as the template's grammar writes it, the value the parser gives it)."""
    if isinstance(template, RatingTemplate):
        return {f"p_{v}": (verdict_text(v), float(v)) for v in range(template.scale_min, template.scale_max + 1)}
    if isinstance(template, YesNoTemplate):
        return {"p_yes": ('{"answer": "yes"}', 1.0), "p_no": ('{"answer": "no"}', 0.0)}
    choices = {"p_A": ('{"better": "A"}', 1.0), "p_B": ('{"better": "B"}', -1.0)}
    return choices | ({"p_tie": ('{"better": "tie"}', 0.0)} if template.allow_tie else {})


async def verdict_distribution(
    client: ModelClient, template: ReadTemplate, variables: dict[str, str], judge_model: str, conversation: str
) -> dict[str, float]:
    """Each verdict's probability (renormalised over the template's verdicts) and the verdict read from
    them (`EXPECTED`): the expected rating, P(yes), or the most probable preference; plus a rating's
    entropy and a preference's P(A) - P(B)."""
    messages = judge_messages(template, variables)
    choices = verdict_choices(template)
    scores = await asyncio.gather(
        *(
            client.score("judge", messages, continuation=text, model=judge_model, conversation=f"{conversation}-{name}")
            for name, (text, _) in choices.items()
        )
    )
    totals = [sum(s.token_logprobs) for s in scores]
    probabilities = dict(zip(choices, scale_distribution(totals), strict=True))
    if isinstance(template, RatingTemplate):
        return expected_score(totals, template.scale_min) | probabilities
    if isinstance(template, YesNoTemplate):
        return {EXPECTED: probabilities["p_yes"]} | probabilities
    best = max(probabilities, key=lambda name: probabilities[name])
    preference = probabilities["p_A"] - probabilities["p_B"]
    return {EXPECTED: choices[best][1], "preference": preference} | probabilities


async def read_verdict(
    ctx: EpisodeContext,
    template: ReadTemplate,
    variables: dict[str, str],
    *,
    judge_model: str,
    panel: str,
    target_idx: int,
    order_swapped: bool = False,
    shorter: Sequence[dict[str, str]] | None = None,
) -> list[JudgmentRecord]:
    """One judge's verdict read from its probabilities; the record is also added to the episode.

    `shorter`: variables with less history, tried in order while the prompt does not fit the
    judge's context (as `ask_judge` does); when none fits, the verdict is stored unparsed."""
    conversation = f"judge-{target_idx}-{int(order_swapped)}"
    read, failure = await first_that_fits(
        lambda filled: verdict_distribution(ctx.client, template, filled, judge_model, conversation), variables, shorter
    )
    record = JudgmentRecord(
        panel=panel,
        judge=judge_model,
        mode=EXPECTED_RATING_MODE,
        template=template.name,
        target_idx=target_idx,
        criterion=template.outputs()[0],
        score=None if read is None else read[EXPECTED],
        raw_text=failure if read is None else json.dumps(read),
        parsed=read is not None,
        order_swapped=order_swapped,
    )
    ctx.judgments.append(record)
    return [record]


def roles_verdict_text(written: Sequence[tuple[str, int]], role: str, value: int) -> str:
    """The start of a roles verdict up to `role`'s score `value` (the roles before it already written)."""
    entries = [f'"{name}": {{"{RATING}": {score}}}' for name, score in (*written, (role, value))]
    return "{" + ", ".join(entries) + "}"


async def read_roles(
    ctx: EpisodeContext,
    template: RolesTemplate,
    variables: dict[str, str],
    targets: Mapping[str, int],
    *,
    judge_model: str,
    panel: str,
) -> dict[str, float | None]:
    """Each role's probability-weighted score (see the module docstring); one record per role."""
    messages = judge_messages(template, variables)
    values = list(range(template.scale_min, template.scale_max + 1))
    written: list[tuple[str, int]] = []
    read: dict[str, float | None] = {}
    for role, target_idx in targets.items():
        scores = await asyncio.gather(
            *(
                ctx.client.score(
                    "judge",
                    messages,
                    continuation=roles_verdict_text(written, role, value),
                    model=judge_model,
                    conversation=f"judge-roles-{len(written)}-p{value}",
                )
                for value in values
            )
        )
        totals = [sum(s.token_logprobs) for s in scores]
        distribution = expected_score(totals, template.scale_min) | {
            f"p_{value}": p for value, p in zip(values, scale_distribution(totals), strict=True)
        }
        written.append((role, values[totals.index(max(totals))]))
        read[role] = distribution[EXPECTED]
        ctx.judgments.append(
            JudgmentRecord(
                panel=panel,
                judge=judge_model,
                mode=EXPECTED_RATING_MODE,
                template=template.name,
                target_idx=target_idx,
                criterion=RATING,
                score=distribution[EXPECTED],
                raw_text=json.dumps(distribution),
                parsed=True,
            )
        )
    return read
