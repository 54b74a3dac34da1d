"""Workload 5: grammar-constrained judging, with the grammar applied only where a sampled token breaks it.

A sampled judge answers under its template's GBNF grammar. Applying a grammar to every candidate of
a 262k-token vocabulary (Gemma 3) costs more than the decode step itself, so the engine samples first
and checks the chosen token against the grammar, constraining only on a rejection. This workload
decodes the same judge requests three ways: no grammar, the grammar on every token (strict), and
sample-first (lazy), and checks that greedy verdicts are the same under strict and lazy.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel

from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.types import Completion, GenerationRequest, ResolvedSampling
from appliance.judging.templates import LikertTemplate

_REPLIES = [
    "I spent the weekend repairing an old bicycle and it rides again.",
    "No.",
    "The moon is made of cheese, everyone knows that, ask any mouse.",
    "I am sorry to hear that; would a short walk help you think it over?",
]


class GrammarArm(BaseModel):
    wall_s: float
    generated_tokens: int
    tokens_per_s: float
    grammar_rejections: int = 0


class GrammarBench(BaseModel):
    model: str
    requests: int
    free: GrammarArm
    strict: GrammarArm
    lazy: GrammarArm
    #: greedy verdicts identical under strict and lazy application
    identical: bool
    #: lazy / strict tokens per second
    speedup: float


def _requests(template: LikertTemplate, count: int, max_tokens: int, grammar: str | None) -> list[GenerationRequest]:
    sampling = ResolvedSampling(temperature=0.0, max_tokens=max_tokens)
    criteria = ", ".join(f'"{criterion}"' for criterion in template.criteria)
    return [
        GenerationRequest(
            prompt=(
                f"Rate the reply below on {criteria}, each from {template.scale_min} to {template.scale_max}, "
                f"and say whether it refuses. Answer in JSON.\nReply {index}: {_REPLIES[index % len(_REPLIES)]}\n"
                "JSON:"
            ),
            sampling=sampling,
            grammar=grammar,
        )
        for index in range(count)
    ]


def _arm(model: Path, name: str, requests: list[GenerationRequest], *, lazy: bool) -> tuple[GrammarArm, list[str]]:
    backend = LlamaCppBackend(model, name=name, context_length=512, slots=len(requests), lazy_grammar=lazy)
    try:
        tickets = {backend.submit(request): index for index, request in enumerate(requests)}
        done: dict[int, Completion] = {}
        started = time.perf_counter()
        while backend.busy:
            for ticket, completion in backend.step():
                done[tickets[ticket]] = completion
        wall = time.perf_counter() - started
        generated = sum(c.completion_tokens for c in done.values())
        arm = GrammarArm(
            wall_s=wall,
            generated_tokens=generated,
            tokens_per_s=generated / wall if wall else 0.0,
            grammar_rejections=backend.counters.grammar_rejections,
        )
        return arm, [done[index].text for index in range(len(requests))]
    finally:
        backend.close()


def grammar_bench(model: Path, name: str, template: LikertTemplate, requests: int, max_tokens: int) -> GrammarBench:
    free, _ = _arm(model, name, _requests(template, requests, max_tokens, None), lazy=True)
    constrained = _requests(template, requests, max_tokens, template.grammar())
    strict, strict_texts = _arm(model, name, constrained, lazy=False)
    lazy, lazy_texts = _arm(model, name, constrained, lazy=True)
    return GrammarBench(
        model=name,
        requests=requests,
        free=free,
        strict=strict,
        lazy=lazy,
        identical=strict_texts == lazy_texts,
        speedup=lazy.tokens_per_s / strict.tokens_per_s if strict.tokens_per_s else 0.0,
    )


def markdown_lines(result: GrammarBench | None) -> list[str]:
    if result is None:
        return []
    return [
        f"## Grammar-constrained judging: {result.requests} sampled verdicts by {result.model}",
        "",
        "| grammar | wall s | generated tokens | tok/s | tokens the grammar refused |",
        "| --- | ---: | ---: | ---: | ---: |",
        *[
            f"| {label} | {arm.wall_s:.1f} | {arm.generated_tokens} | {arm.tokens_per_s:.1f} | "
            f"{arm.grammar_rejections} |"
            for label, arm in (
                ("none (free text)", result.free),
                ("applied to every token", result.strict),
                ("sample first, applied on a refusal", result.lazy),
            )
        ],
        "",
        f"Sample-first is {result.speedup:.2f}x the strict rate; greedy verdicts identical: {result.identical}.",
        "",
    ]
