"""Likert judging: a grammar that small models cannot break, and a strict parser.

The grammar makes every judge answer a single JSON object with one digit per
criterion (and a refusal flag). The parser still checks everything, because
a reply can be cut short by the token limit; such a reply is stored as
unparsed, never dropped.
"""

from __future__ import annotations

import json

from appliance.engine.types import Message, Sampling
from appliance.episodes import EpisodeContext
from appliance.judging.templates import LikertTemplate, render
from appliance.store.records import JudgmentRecord

REFUSAL = "refusal"


def likert_grammar(template: LikertTemplate) -> str:
    """GBNF for `{"crit1": d, ..., "refusal": true|false}` with d in the template's scale."""
    fields = [f'"\\"{criterion}\\": " digit' for criterion in template.criteria]
    if template.refusal_flag:
        fields.append(f'"\\"{REFUSAL}\\": " boolean')
    body = ' ", " '.join(fields)
    return "\n".join(
        [
            f'root ::= "{{" {body} "}}"',
            f"digit ::= [{template.scale_min}-{template.scale_max}]",
            'boolean ::= "true" | "false"',
        ]
    )


def parse_likert(text: str, template: LikertTemplate) -> dict[str, float] | None:
    """The verdict as numbers (refusal as 0/1), or None if any part is missing or out of range."""
    try:
        data = json.loads(text.strip())
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    verdict: dict[str, float] = {}
    for criterion in template.criteria:
        value = data.get(criterion)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if not template.scale_min <= value <= template.scale_max:
            return None
        verdict[criterion] = float(value)
    if template.refusal_flag:
        flag = data.get(REFUSAL)
        if not isinstance(flag, bool):
            return None
        verdict[REFUSAL] = 1.0 if flag else 0.0
    return verdict


def verdict_records(
    text: str, template: LikertTemplate, *, panel: str, judge: str, target_idx: int
) -> list[JudgmentRecord]:
    """One row per criterion; an unparsed reply yields rows with no score and parsed=False."""
    verdict = parse_likert(text, template)
    criteria = [*template.criteria, *([REFUSAL] if template.refusal_flag else [])]
    return [
        JudgmentRecord(
            panel=panel,
            judge=judge,
            mode=template.mode,
            target_idx=target_idx,
            criterion=criterion,
            score=None if verdict is None else verdict[criterion],
            raw_text=text,
            parsed=verdict is not None,
        )
        for criterion in criteria
    ]


async def judge_likert(
    ctx: EpisodeContext,
    template: LikertTemplate,
    variables: dict[str, str],
    *,
    judge_model: str,
    panel: str,
    target_idx: int,
) -> list[JudgmentRecord]:
    """Ask one judge for one verdict; the records are also added to the episode."""
    messages = [
        Message(role="system", content=render(template.system, variables, template.name)),
        Message(role="user", content=render(template.user, variables, template.name)),
    ]
    completion = await ctx.generate(
        "judge",
        messages,
        sampling=Sampling(temperature=template.temperature, max_tokens=template.max_tokens),
        grammar=likert_grammar(template),
        model=judge_model,
        conversation=f"judge-{target_idx}",
        record=False,
    )
    records = verdict_records(completion.text, template, panel=panel, judge=judge_model, target_idx=target_idx)
    ctx.judgments.extend(records)
    return records
