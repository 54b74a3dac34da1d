"""Shortening a judge's prompt until it fits the judge's context.

Families pass a judge the conversation with less and less history (`shorter`); a sampled verdict
and a read rating both try them in order, and a verdict that never fits is stored unparsed with the
engine's message rather than failing the episode.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from appliance.episodes.client import EpisodeFailed

T = TypeVar("T")


async def first_that_fits(
    attempt: Callable[[dict[str, str]], Awaitable[T]],
    variables: dict[str, str],
    shorter: Sequence[dict[str, str]] | None,
) -> tuple[T | None, str]:
    """`attempt(variables)`, then `attempt` on each shorter variant while the prompt does not fit.

    Returns the first result, or None and why nothing fitted. `shorter` None: no retry, a prompt that
    does not fit fails the episode."""
    if shorter is None:
        return await attempt(variables), ""
    failure = ""
    for candidate in (variables, *shorter):
        try:
            return await attempt(candidate), ""
        except EpisodeFailed as error:
            failure = f"(not judged: {error})"
    return None, failure
