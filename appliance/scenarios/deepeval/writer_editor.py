"""What the two writer-editor tasks share: the judge panel rates each role on the whole exchange.

The exchange is rebuilt from the stored transcript (messages whose speaker is
a role's seat), so a stored run can be judged again by another panel. Judges
see role names only, never model names.
"""

from __future__ import annotations

import asyncio
from statistics import mean

from appliance.episodes import EpisodeContext, EpisodeFailed
from appliance.judging.templates import RatingTemplate
from appliance.judging.verdicts import ask_judge
from appliance.store.records import ScoreRecord


def exchange_text(ctx: EpisodeContext, roles: list[str]) -> str:
    lines = [f"{m.speaker}:\n{m.text.strip() or '(empty reply)'}" for m in ctx.messages if m.speaker in roles]
    return "\n\n".join(lines)


async def rate_roles(
    ctx: EpisodeContext,
    template: RatingTemplate,
    *,
    task: str,
    criteria: dict[str, str],
    judges: list[str],
    panel: str,
) -> None:
    """Every judge rates every role (`criteria`: role -> what to judge); adds `rating:<role>` scores,
    the mean of the judges whose verdict parsed, for the model that wrote the role's messages."""
    roles = list(criteria)
    transcript = exchange_text(ctx, roles)
    last = {m.speaker: m.idx for m in ctx.messages if m.speaker in roles}
    models = {m.speaker: m.model for m in ctx.messages if m.speaker in roles}
    missing = [role for role in roles if role not in last]
    if missing:
        raise EpisodeFailed(f"the transcript has no message from {', '.join(missing)}")
    asks = [
        ask_judge(
            ctx,
            template,
            {"task": task, "role": role, "criteria": criteria[role], "transcript": transcript},
            judge_model=judge,
            panel=panel,
            target_idx=last[role],
        )
        for role in roles
        for judge in judges
    ]
    verdicts = await asyncio.gather(*asks)
    for index, role in enumerate(roles):
        own = verdicts[index * len(judges) : (index + 1) * len(judges)]
        values = [record.score for records in own for record in records if record.score is not None]
        ctx.scores.append(
            ScoreRecord(
                panel=panel,
                player=models[role],
                metric=f"rating:{role.lower()}",
                value=mean(values) if values else None,
            )
        )
