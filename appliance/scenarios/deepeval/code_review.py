"""Code review (asymmetric writer-editor): a Programmer writes a function, a Reviewer comments.

The Programmer answers the problem; then, until the Reviewer replies with
the done word or `max_reviews` reviews were given, the Reviewer reviews and
the Programmer revises. The final code runs against the problem's tests in
the sandbox (appliance/sandbox: kernel isolation, values compared outside);
the first version is run too, so a review's effect on the tests is measured.
The panel then rates both roles, and those ratings are both roles' payoffs, as in
the paper; the share of tests passed is reported beside them.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from appliance.catalog.sampling import Sampling
from appliance.episodes.context import EpisodeContext
from appliance.judging.templates import RolesTemplate
from appliance.sandbox.cases import TestCase
from appliance.sandbox.run import Isolation, TestRun, run_tests
from appliance.scenarios.base import RULE_SCORER
from appliance.scenarios.deepeval.referee import Referee, Seat
from appliance.scenarios.deepeval.settings import DeepEvalSettings, read_entries
from appliance.scenarios.deepeval.writer_editor import rate_roles
from appliance.store.records import ScoreRecord

PROGRAMMER, REVIEWER = "Programmer", "Reviewer"
_FENCED = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


class CodeProblem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    function: str
    description: str
    #: calls and what they must give; the expected values stay in the appliance's process
    tests: list[TestCase] = Field(min_length=1)
    #: a known-good solution (the test suite checks that it passes the tests)
    reference: str


def load_problems(path: Path) -> list[CodeProblem]:
    return read_entries(path, "problem", CodeProblem, "code problems")


def extract_code(reply: str) -> str:
    """The last fenced block of a reply (an unclosed fence runs to the end), else the whole reply."""
    blocks = _FENCED.findall(reply)
    return (blocks[-1] if blocks else reply).strip()


def review_is_done(review: str, done_word: str) -> bool:
    """The reviewer approves by replying with the done word alone (trailing punctuation allowed)."""
    return review.strip().strip(".!*`'\"").upper() == done_word.upper()


async def play_code_review(ctx: EpisodeContext, settings: DeepEvalSettings, problem: CodeProblem) -> None:
    """Play the exchange and run the tests; the family then has the panel rate both roles."""
    rules = settings.code_review
    seats = [
        Seat(PROGRAMMER, "player", rules.programmer_system),
        Seat(REVIEWER, "partner", rules.reviewer_system.format(done_word=rules.done_word)),
    ]
    referee = Referee(ctx, seats)
    referee.post(rules.task.format(description=problem.description), [PROGRAMMER])
    referee.end_round()
    temperature = settings.players.temperature
    writing = Sampling(temperature=temperature, max_tokens=rules.programmer_max_tokens)
    reviewing = Sampling(temperature=temperature, max_tokens=rules.reviewer_max_tokens)
    versions: list[str] = []
    reviews = 0
    approved = False
    while True:
        code = extract_code((await referee.collect([PROGRAMMER], sampling=writing))[PROGRAMMER])
        versions.append(code)
        if reviews == rules.max_reviews:
            break
        prompt = rules.review if reviews == 0 else rules.rereview
        referee.post(prompt.format(description=problem.description, code=code), [REVIEWER])
        referee.end_round()
        review = (await referee.collect([REVIEWER], sampling=reviewing))[REVIEWER]
        reviews += 1
        if review_is_done(review, rules.done_word):
            approved = True
            break
        referee.post(rules.revise.format(review=review), [PROGRAMMER])
        referee.end_round()
    referee.end_round()
    isolation: Isolation = "unsafe" if ctx.unsafe_code_execution else "kernel"
    final, first = await asyncio.gather(
        asyncio.to_thread(run_tests, versions[-1], problem.tests, rules.sandbox, isolation),
        asyncio.to_thread(run_tests, versions[0], problem.tests, rules.sandbox, isolation),
    )
    ctx.metadata.update(
        reviews=reviews,
        approved=approved,
        final_code=versions[-1],
        tests=_described(final),
        first_tests=_described(first),
    )
    programmer, reviewer = referee.models[PROGRAMMER], referee.models[REVIEWER]
    ctx.scores += [
        ScoreRecord(panel=RULE_SCORER, player=programmer, metric="tests:programmer", value=final.fraction),
        ScoreRecord(panel=RULE_SCORER, player=reviewer, metric="gain:reviewer", value=final.fraction - first.fraction),
    ]


async def judge_code_review(
    ctx: EpisodeContext,
    settings: DeepEvalSettings,
    problem: CodeProblem,
    template: RolesTemplate,
    judges: list[str],
    panel: str,
) -> None:
    rules = settings.code_review
    await rate_roles(
        ctx,
        template,
        task=f"A programmer solves this problem in Python while a reviewer reviews the code.\n{problem.description}",
        criteria={PROGRAMMER: rules.programmer_criteria, REVIEWER: rules.reviewer_criteria},
        judges=judges,
        panel=panel,
    )


def _described(run: TestRun) -> dict[str, object]:
    return {
        "status": run.status,
        "passed": run.passed,
        "total": run.total,
        "detail": run.detail,
        "isolation": run.isolation,
    }
