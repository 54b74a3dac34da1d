"""What the two writer-editor tasks share: the judge panel rates each role on the whole exchange.

The exchange is rebuilt from the stored transcript (messages whose speaker is
a role's seat), so a stored run can be judged again by another panel. Judges
see role names only, never model names.
"""

from __future__ import annotations

import asyncio
from statistics import mean

from appliance.client import EpisodeFailed
from appliance.episodes import EpisodeContext
from appliance.judging.templates import RatingTemplate
from appliance.judging.verdicts import ask_judge
from appliance.store.records import ScoreRecord


def role_judges(judges: list[str], author: str, exclude_self_judging: bool) -> list[str]:
    """The judges that rate a role written by `author`: all of them, or all but the author's own model."""
    return [judge for judge in judges if not (exclude_self_judging and judge == author)]


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
    the mean of the judges whose verdict parsed, for the model that wrote the role's messages.

    With `ctx.exclude_self_judging`, a judge does not rate a role its own model wrote; the other
    judges score it, and a role no other judge can rate gets no rating (stored as None)."""
    roles = list(criteria)
    transcript = exchange_text(ctx, roles)
    last = {m.speaker: m.idx for m in ctx.messages if m.speaker in roles}
    models = {m.speaker: m.model for m in ctx.messages if m.speaker in roles}
    missing = [role for role in roles if role not in last]
    if missing:
        raise EpisodeFailed(f"the transcript has no message from {', '.join(missing)}")
    raters = {role: role_judges(judges, models[role], ctx.exclude_self_judging) for role in roles}
    if ctx.exclude_self_judging:
        ctx.metadata["excluded_self_judges"] = {
            role: [judge for judge in judges if judge not in raters[role]] for role in roles
        }
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
        for judge in raters[role]
    ]
    verdicts = iter(await asyncio.gather(*asks))
    for role in roles:
        own = [next(verdicts) for _ in raters[role]]
        values = [record.score for records in own for record in records if record.score is not None]
        ctx.scores.append(
            ScoreRecord(
                panel=panel,
                player=models[role],
                metric=f"rating:{role.lower()}",
                value=mean(values) if values else None,
            )
        )
