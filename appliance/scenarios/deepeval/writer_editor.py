"""What the two writer-editor tasks share: each judge of the panel rates both roles in one call.

As the paper's referee does, a judge reads the whole exchange once and gives every role a score
from 1 to 10 with the basis of that score (`judges/deepeval_role_rating.toml`, mode `roles`). The
exchange is rebuilt from the stored transcript (messages whose speaker is a role's seat), so a
stored run can be judged again by another panel. Judges see role names only, never model names.
"""

from __future__ import annotations

import asyncio
from statistics import mean

from appliance.episodes.client import EpisodeFailed
from appliance.episodes.context import EpisodeContext
from appliance.judging.templates import RolesTemplate
from appliance.judging.verdicts import ask_roles
from appliance.store.records import ScoreRecord


def role_judges(judges: list[str], author: str, exclude_self_judging: bool) -> list[str]:
    """The judges that rate a role written by `author`: all of them, or all but the author's own model."""
    return [judge for judge in judges if not (exclude_self_judging and judge == author)]


def exchange_text(ctx: EpisodeContext, roles: list[str]) -> str:
    lines = [f"{m.speaker}:\n{m.text.strip() or '(empty reply)'}" for m in ctx.messages if m.speaker in roles]
    return "\n\n".join(lines)


async def rate_roles(
    ctx: EpisodeContext,
    template: RolesTemplate,
    *,
    task: str,
    criteria: dict[str, str],
    judges: list[str],
    panel: str,
) -> None:
    """Every judge rates every role in one verdict (`criteria`: role -> what to judge, in the order the
    roles are rated); adds `rating:<role>` scores, the mean of the judges whose verdict parsed, for
    the model that wrote the role's messages.

    With `ctx.exclude_self_judging`, a judge's score of a role its own model wrote is left out of that
    role's rating (a judge that wrote every role is not asked); a role no other judge can rate gets
    no rating (stored as None)."""
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
    variables = {
        "task": task,
        "roles": " and the ".join(roles),
        "criteria": "\n".join(f"{number}. {role}: {criteria[role]}" for number, role in enumerate(roles, 1)),
        "transcript": transcript,
    }
    asked = [judge for judge in judges if any(judge in raters[role] for role in roles)]
    targets = {role: last[role] for role in roles}
    verdicts = await asyncio.gather(
        *(ask_roles(ctx, template, variables, targets, judge_model=judge, panel=panel) for judge in asked)
    )
    for role in roles:
        values = [
            score
            for judge, verdict in zip(asked, verdicts, strict=True)
            if judge in raters[role] and (score := verdict[role]) is not None
        ]
        ctx.scores.append(
            ScoreRecord(
                panel=panel,
                player=models[role],
                metric=f"rating:{role.lower()}",
                value=mean(values) if values else None,
            )
        )
