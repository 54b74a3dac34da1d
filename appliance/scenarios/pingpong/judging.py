"""How the PingPong panel judges a finished conversation.

`conversation` (the paper's way, the default): each judge reads the whole
conversation once and scores every reply of the character, after a short
reasoning, in one request. `turn`: each judge rates each reply in its own
request, seeing the conversation up to it; it is the mode calibration label
sets (single turns) fit. Both write the same per-turn verdict rows, so the
scores and the report do not depend on the mode.

A likelihood panel (`Panel.judging = "likelihood"`) reads each judge's
probabilities instead: `judge_turn_likelihood` stores every reply's features
(one row per feature), and a calibration turns them into a human score.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Coroutine, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from appliance.catalog.sampling import Sampling
from appliance.engine.types import Message
from appliance.episodes.client import EpisodeFailed
from appliance.episodes.context import EpisodeContext
from appliance.judging.scoring import scoring_features
from appliance.judging.scoring_templates import ScoringTemplate
from appliance.judging.templates import ConversationTemplate, LikertTemplate, render
from appliance.judging.verdicts import ask_judge
from appliance.store.records import JudgmentRecord, MessageRecord

JudgingMode = Literal["conversation", "turn"]
JUDGING_FILE = "judging.toml"


class JudgingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: JudgingMode = "conversation"


def transcript(name: str, greeting: str, messages: list[MessageRecord]) -> tuple[str, list[int]]:
    """The conversation as the judge reads it, the character's replies numbered; and their message indexes."""
    lines = [f"{name}: {greeting}"] if greeting else []
    scored: list[int] = []
    for message in messages:
        if message.speaker == "player":
            scored.append(message.idx)
            lines.append(f"[{len(scored)}] {name}: {message.text.strip()}")
        else:
            lines.append(f"User: {message.text.strip()}")
    return "\n".join(lines), scored


async def judge_conversation(
    ctx: EpisodeContext,
    template: ConversationTemplate,
    variables: dict[str, str],
    greeting: str,
    judges: list[str],
    panel: str,
) -> None:
    """Every judge reads the conversation once; its verdict is split into one row per reply and output."""
    text, scored = transcript(variables["name"], greeting, ctx.messages)
    source = f"judges/{template.name}.toml"
    filled = {**variables, "transcript": text, "turns": str(len(scored))}
    messages = [
        Message(role="system", content=render(template.system, filled, source)),
        Message(role="user", content=render(template.user, filled, source)),
    ]
    sampling = Sampling(temperature=template.temperature, max_tokens=template.budget(len(scored)))

    async def one(judge: str) -> None:
        try:
            completion = await ctx.generate(
                "judge",
                messages,
                sampling=sampling,
                grammar=template.grammar(len(scored)),
                model=judge,
                conversation="judge-conversation",
                record=False,
            )
            raw, verdicts = completion.text, template.parse_turns(completion.text, len(scored))
        except EpisodeFailed as error:  # the transcript does not fit this judge: its verdicts are unparsed
            raw, verdicts = f"judge context overflow: {error}", None
        for position, target in enumerate(scored):
            for output in template.outputs():
                ctx.judgments.append(
                    JudgmentRecord(
                        panel=panel,
                        judge=judge,
                        mode="likert",
                        template=template.name,
                        target_idx=target,
                        criterion=output,
                        score=None if verdicts is None else verdicts[position][output],
                        raw_text=raw,
                        parsed=verdicts is not None,
                    )
                )

    await asyncio.gather(*(one(judge) for judge in judges))


async def judge_each_turn(
    ctx: EpisodeContext,
    template: LikertTemplate,
    variables: dict[str, str],
    greeting: str,
    judges: list[str],
    panel: str,
) -> None:
    """Every judge rates every reply in its own request; all requests go out at once to be batched."""
    name = variables["name"]
    requests = []
    dialogue_lines = [f"{name}: {greeting}"] if greeting else []
    for message in ctx.messages:
        if message.speaker == "player":
            shown = {**variables, "dialogue": "\n".join(dialogue_lines), "reply": message.text.strip()}
            for judge in judges:
                requests.append(ask_judge(ctx, template, shown, judge_model=judge, panel=panel, target_idx=message.idx))
        label = name if message.speaker == "player" else "User"
        dialogue_lines.append(f"{label}: {message.text.strip()}")
    await asyncio.gather(*requests)


async def judge_turn_likelihood(
    ctx: EpisodeContext,
    template: ScoringTemplate,
    variables: dict[str, str],
    greeting: str,
    judges: list[str],
    panel: str,
) -> None:
    """Every judge's features of every reply, reading the conversation up to it; one row per feature."""
    requests: list[Coroutine[Any, Any, None]] = []

    async def one(judge: str, target: int, shown: dict[str, str]) -> None:
        try:
            features: dict[str, float] | None = await scoring_features(
                ctx.client, template, shown, judge, f"lik-{target}"
            )
            raw = json.dumps(features)
        except EpisodeFailed as error:  # the conversation does not fit this judge: no features
            features, raw = None, f"judge context overflow: {error}"
        for output in template.outputs():
            value = None if features is None else features.get(output)
            ctx.judgments.append(
                JudgmentRecord(
                    panel=panel,
                    judge=judge,
                    mode=template.mode,
                    template=template.name,
                    target_idx=target,
                    criterion=output,
                    score=value if value is not None and math.isfinite(value) else None,
                    raw_text=raw,
                    parsed=features is not None,
                )
            )

    spoken = [(message.speaker, message.text) for message in ctx.messages]
    for target, shown in replies_in_context(variables, greeting, spoken):
        requests.extend(one(judge, target, shown) for judge in judges)
    await asyncio.gather(*requests)


def replies_in_context(
    variables: dict[str, str], greeting: str, spoken: Sequence[tuple[str, str]]
) -> list[tuple[int, dict[str, str]]]:
    """Each player reply (its index in `spoken`, the (speaker, text) of every message) with what a
    likelihood judge is shown of it: the template's variables, the conversation before it, the reply."""
    name = variables["name"]
    lines = [f"{name}: {greeting}"] if greeting else []
    replies = []
    for index, (speaker, text) in enumerate(spoken):
        if speaker == "player":
            replies.append(
                (index, {**variables, "context": "\n".join(lines), "response": text.strip(), "speaker": name})
            )
        label = name if speaker == "player" else "User"
        lines.append(f"{label}: {text.strip()}")
    return replies
