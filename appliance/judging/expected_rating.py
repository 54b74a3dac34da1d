"""A rating judge read from its probabilities instead of sampled (under a likelihood panel).

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

Prefill only: the prompt is shared by all of a verdict's requests, so the engine computes it
once and each value costs a few tokens.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from appliance.client import ModelClient
from appliance.episodes import EpisodeContext
from appliance.judging.fitting import first_that_fits
from appliance.judging.scoring_templates import EXPECTED, expected_score, scale_distribution
from appliance.judging.templates import RATING, RatingTemplate, judge_messages
from appliance.store.records import JudgmentRecord

#: the `mode` of the verdict rows a read rating writes (a sampled one writes "rating")
EXPECTED_RATING_MODE = "expected"


def verdict_text(value: int) -> str:
    """What the judge would write for `value` (the template's grammar without reasoning)."""
    return f'{{"{RATING}": {value}}}'


async def rating_distribution(
    client: ModelClient, template: RatingTemplate, variables: dict[str, str], judge_model: str, conversation: str
) -> dict[str, float]:
    """The judge's expected score and entropy over the scale, and each value's probability (`p_<n>`)."""
    messages = judge_messages(template, variables)
    values = range(template.scale_min, template.scale_max + 1)
    scores = await asyncio.gather(
        *(
            client.score(
                "judge", messages, continuation=verdict_text(v), model=judge_model, conversation=f"{conversation}-v{v}"
            )
            for v in values
        )
    )
    totals = [sum(s.token_logprobs) for s in scores]
    probabilities = scale_distribution(totals)
    return expected_score(totals, template.scale_min) | {
        f"p_{v}": p for v, p in zip(values, probabilities, strict=True)
    }


async def read_rating(
    ctx: EpisodeContext,
    template: RatingTemplate,
    variables: dict[str, str],
    *,
    judge_model: str,
    panel: str,
    target_idx: int,
    order_swapped: bool = False,
    shorter: Sequence[dict[str, str]] | None = None,
) -> list[JudgmentRecord]:
    """One judge's rating read from its probabilities; the record is also added to the episode.

    `shorter`: variables with less history, tried in order while the prompt does not fit the
    judge's context (as `ask_judge` does); when none fits, the verdict is stored unparsed."""
    conversation = f"judge-{target_idx}-{int(order_swapped)}"
    read, failure = await first_that_fits(
        lambda filled: rating_distribution(ctx.client, template, filled, judge_model, conversation), variables, shorter
    )
    record = JudgmentRecord(
        panel=panel,
        judge=judge_model,
        mode=EXPECTED_RATING_MODE,
        template=template.name,
        target_idx=target_idx,
        criterion=RATING,
        score=None if read is None else read[EXPECTED],
        raw_text=failure if read is None else json.dumps(read),
        parsed=read is not None,
        order_swapped=order_swapped,
    )
    ctx.judgments.append(record)
    return [record]
