"""A probability-reading judge's requests: every feature of one text from one judge, batched."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from statistics import fmean

from appliance.engine.types import ScoredText
from appliance.episodes.client import EpisodeFailed, ModelClient
from appliance.judging.scoring_templates import (
    BASELINE,
    EACH_NEGATIVE,
    EACH_POSITIVE,
    FOLLOWUP,
    GAIN,
    LOGPROB,
    NEGATIVE,
    PMI,
    POSITION_LEAN,
    POSITIVE,
    PREFERENCE,
    PRIOR,
    TOKENS,
    ExpectedScoreTemplate,
    LikelihoodTemplate,
    ScoringTemplate,
    expected_score,
    pair_features,
    scoring_variables,
)
from appliance.judging.templates import render


async def scoring_features(
    client: ModelClient, template: ScoringTemplate, variables: dict[str, str], judge: str, conversation: str
) -> dict[str, float]:
    """Every feature of one text from one judge; all its requests go out at once (they share prefixes)."""
    filled = scoring_variables(template, variables)
    source = f"judges/{template.name}.toml"
    if isinstance(template, ExpectedScoreTemplate):
        scores = await client.score(
            "judge",
            render(template.prompt, filled, source),
            choices=template.choices(),
            model=judge,
            conversation=conversation,
        )
        return expected_score(list(scores.choice_logprobs), template.scale_min)

    def text(prompt: str, continuation: str) -> ScoredText:
        return ScoredText(prompt=render(prompt, filled, source), continuation=render(continuation, filled, source))

    async def mean_logprob(scored: ScoredText, key: str, extends: ScoredText | None = None) -> tuple[float, int]:
        scores = await client.score(
            "judge",
            scored.prompt,
            continuation=scored.continuation,
            model=judge,
            conversation=f"{conversation}-{key}",
            extends=extends,
        )
        return scores.mean, len(scores.token_logprobs)

    # The reply is scored first, and the follow-ups after it declare that they extend its text: the
    # reply is then computed once, read by its own request and reused by all its follow-ups.
    reply = text(template.prompt, template.continuation) if template.continuation else None
    followups = [" " + line.strip() for line in (*template.positive, *template.negative)]
    requests = [mean_logprob(reply, "c")] if reply is not None else []
    requests += [mean_logprob(text(template.followup_prompt, f), f"f{i}", reply) for i, f in enumerate(followups)]
    if template.baseline_prompt:
        requests += [mean_logprob(text(template.baseline_prompt, f), f"b{i}") for i, f in enumerate(followups)]
    if template.prior_prompt:
        requests.append(mean_logprob(text(template.prior_prompt, template.continuation), "p"))
    results = await asyncio.gather(*requests)
    conditional, results = (results[:1], results[1:]) if reply is not None else ([], results)
    count, split = len(followups), len(template.positive)
    after = [value for value, _ in results[:count]]
    features = {
        FOLLOWUP: fmean(after[:split]) - fmean(after[split:]),
        POSITIVE: fmean(after[:split]),
        NEGATIVE: fmean(after[split:]),
    }
    if template.each_followup:
        features |= {f"{EACH_POSITIVE}{i}": value for i, value in enumerate(after[:split], start=1)}
        features |= {f"{EACH_NEGATIVE}{i}": value for i, value in enumerate(after[split:], start=1)}
    rest = results[count:]
    if template.baseline_prompt:
        before = [value for value, _ in rest[:count]]
        features[BASELINE] = fmean(before[:split]) - fmean(before[split:])
        features[GAIN] = features[FOLLOWUP] - features[BASELINE]
        rest = rest[count:]
    if conditional:
        logprob, tokens = conditional[0]
        features |= {LOGPROB: logprob, TOKENS: float(tokens)}
        if template.prior_prompt:
            prior, _ = rest[0]
            features |= {PRIOR: prior, PMI: (logprob - prior) * tokens}
    return features


async def comparison_features(
    client: ModelClient, template: LikelihoodTemplate, variables: dict[str, str], judge: str, conversation: str
) -> dict[str, float]:
    """A pair read directly: the choices' probabilities after `comparison_prompt` with the first response
    shown as A, then as B. Asked in both orders, a lean that only follows the slot cancels out of
    `preference` and shows in `position_lean`."""
    filled = scoring_variables(template, variables)
    source = f"judges/{template.name}.toml"
    first, second = filled["response_a"], filled["response_b"]
    prompts = [
        render(template.comparison_prompt, {**filled, "response_a": a, "response_b": b}, source)
        for a, b in ((first, second), (second, first))
    ]
    scores = await asyncio.gather(
        *(
            client.score(
                "judge", prompt, choices=template.comparison_choices, model=judge, conversation=f"{conversation}-{n}"
            )
            for n, prompt in enumerate(prompts)
        )
    )
    if any(len(s.choice_logprobs) != 2 for s in scores):
        raise EpisodeFailed(f"judge '{judge}' returned no probabilities for the comparison's two choices")
    shown_first, shown_second = (s.choice_logprobs[0] - s.choice_logprobs[1] for s in scores)
    return {PREFERENCE: (shown_first - shown_second) / 2, POSITION_LEAN: (shown_first + shown_second) / 2}


#: the pair features a short read gives: the direct comparison's two, and `tokens` (the responses' length
#: difference) counted by the judge's tokenizer instead of read from each response's scored continuation
SHORT_READ_FEATURES = frozenset({PREFERENCE, POSITION_LEAN, TOKENS})


async def pair_reading(
    client: ModelClient,
    template: ScoringTemplate,
    variables: dict[str, str],
    judge: str,
    conversation: str,
    needed: Collection[str] | None = None,
) -> dict[str, float]:
    """One judge's features of a pair (`response_a`, `response_b`): each response read on its own, the
    first's features minus the second's, and where the template has a comparison prompt, the direct
    read of both at once (`preference`, `position_lean`). Calibration reads every feature of a pair this
    way, so a pairwise calibration applies to what a run reads.

    `needed`: the features the caller will use (a run's: its calibration's). When a short read gives them
    all (`SHORT_READ_FEATURES`), the responses are not read one by one: the same numbers from two
    requests instead of fourteen (`instruction_likelihood`)."""
    direct = template if isinstance(template, LikelihoodTemplate) and template.comparison_prompt else None
    if direct and direct.continuation and needed is not None and set(needed) <= SHORT_READ_FEATURES:
        features = await comparison_features(client, direct, variables, judge, f"{conversation}-compare")
        return features | {TOKENS: float(_tokens(client, direct, variables, judge))}
    reads = [
        scoring_features(client, template, {**variables, "response": variables[key]}, judge, f"{conversation}-{key}")
        for key in ("response_a", "response_b")
    ]
    if direct:
        reads.append(comparison_features(client, direct, variables, judge, f"{conversation}-compare"))
    first, second, *comparison = await asyncio.gather(*reads)
    return pair_features(first, second) | (comparison[0] if comparison else {})


def _tokens(client: ModelClient, template: LikelihoodTemplate, variables: dict[str, str], judge: str) -> int:
    """The first response's continuation minus the second's, in the judge's tokens: the `tokens` difference
    their scored continuations give (one log-probability per token as `count_tokens` counts it; a
    beginning-of-text token the tokenizer adds to a text on its own is in both counts and cancels)."""

    def length(key: str) -> int:
        filled = scoring_variables(template, {**variables, "response": variables[key]})
        text = render(template.continuation, filled, f"judges/{template.name}.toml")
        return client.count_tokens("judge", text, model=judge)

    return length("response_a") - length("response_b")
