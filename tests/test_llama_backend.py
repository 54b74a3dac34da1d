"""The real llama.cpp backend on the embedded SmolLM2: batching and KV reuse change no token."""

from __future__ import annotations

import json

import pytest

from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.types import Completion, GenerationRequest, Message, ResolvedSampling

pytestmark = pytest.mark.real_model

GREEDY = ResolvedSampling(temperature=0.0, max_tokens=24)
PROMPTS = [
    "Name a fruit that is yellow.",
    "Write one sentence about the sea.",
    "What is two plus three?",
    "Give me a name for a cat.",
]


def _ask(text: str, key: str | None = None, sampling: ResolvedSampling = GREEDY) -> GenerationRequest:
    return GenerationRequest(messages=(Message(role="user", content=text),), sampling=sampling, conversation_key=key)


def _run(backend: LlamaCppBackend, requests: list[GenerationRequest]) -> list[Completion]:
    tickets = [backend.submit(request) for request in requests]
    done: dict[int, Completion] = {}
    while backend.busy:
        done.update(backend.step())
    return [done[ticket] for ticket in tickets]


def _forget_caches(backend: LlamaCppBackend) -> None:
    import llama_cpp as C

    for slot in backend.slots:
        C.llama_memory_seq_rm(backend.memory, slot.seq_id, -1, -1)
        slot.cached.clear()
        slot.key = None


def test_batched_greedy_text_equals_each_sequence_alone(smollm2: LlamaCppBackend) -> None:
    alone = []
    for prompt in PROMPTS:
        _forget_caches(smollm2)
        alone.extend(_run(smollm2, [_ask(prompt)]))
    _forget_caches(smollm2)
    calls_before = smollm2.counters.decode_calls
    together = _run(smollm2, [_ask(prompt) for prompt in PROMPTS])
    steps = smollm2.counters.decode_calls - calls_before
    assert [c.text for c in together] == [c.text for c in alone]
    assert all(c.completion_tokens > 0 for c in together)
    # All four decoded in the same steps: far fewer decode calls than tokens generated.
    assert steps <= max(c.completion_tokens for c in together) + 2


def test_continuing_a_conversation_reuses_its_cache_and_matches_a_fresh_prefill(smollm2: LlamaCppBackend) -> None:
    _forget_caches(smollm2)
    history = [
        Message(role="system", content="You are a terse assistant."),
        Message(role="user", content="Say a colour."),
    ]
    first = _run(smollm2, [GenerationRequest(messages=tuple(history), sampling=GREEDY, conversation_key="c1")])[0]
    history += [Message(role="assistant", content=first.text), Message(role="user", content="Now say an animal.")]
    second_request = GenerationRequest(messages=tuple(history), sampling=GREEDY, conversation_key="c1")
    continued = _run(smollm2, [second_request])[0]
    assert continued.cached_prompt_tokens > first.prompt_tokens // 2
    _forget_caches(smollm2)
    fresh = _run(smollm2, [second_request])[0]
    assert fresh.cached_prompt_tokens == 0
    assert continued.text == fresh.text


def test_grammar_constrains_output(smollm2: LlamaCppBackend) -> None:
    grammar = 'root ::= "{\\"score\\": " [1-5] "}"'
    request = GenerationRequest(
        messages=(Message(role="user", content="Rate the weather."),),
        sampling=ResolvedSampling(temperature=1.0, max_tokens=16, seed=3),
        grammar=grammar,
    )
    completion = _run(smollm2, [request])[0]
    assert 1 <= json.loads(completion.text)["score"] <= 5
    assert completion.finish_reason == "stop"


def test_seeded_sampling_is_reproducible_and_seed_sensitive(smollm2: LlamaCppBackend) -> None:
    def sample(seed: int) -> str:
        sampling = ResolvedSampling(temperature=1.0, top_p=0.95, max_tokens=16, seed=seed)
        return _run(smollm2, [_ask("Invent a word.", sampling=sampling)])[0].text

    assert sample(11) == sample(11)
    assert len({sample(seed) for seed in (1, 2, 3, 4)}) > 1


def test_stop_strings_cut_the_text(smollm2: LlamaCppBackend) -> None:
    sampling = ResolvedSampling(temperature=0.0, max_tokens=48, stop=(" ",))
    completion = _run(smollm2, [_ask("Write a long sentence about dogs.", sampling=sampling)])[0]
    assert " " not in completion.text
    assert completion.finish_reason == "stop"


def test_context_overflow_is_reported_not_crashed(smollm2: LlamaCppBackend) -> None:
    too_long = "word " * 2000
    overflow, normal = _run(smollm2, [_ask(too_long), _ask("Say hi.")])
    assert overflow.finish_reason == "context_overflow"
    assert overflow.error is not None and "does not fit" in overflow.error
    assert normal.completion_tokens > 0
