"""The real llama.cpp backend on the embedded SmolLM2: batching and KV reuse change no token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

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


def test_batched_greedy_text_equals_each_sequence_alone(smollm2: LlamaCppBackend) -> None:
    alone = []
    for prompt in PROMPTS:
        smollm2.forget_caches()
        alone.extend(_run(smollm2, [_ask(prompt)]))
    smollm2.forget_caches()
    calls_before = smollm2.counters.decode_calls
    together = _run(smollm2, [_ask(prompt) for prompt in PROMPTS])
    steps = smollm2.counters.decode_calls - calls_before
    assert [c.text for c in together] == [c.text for c in alone]
    assert all(c.completion_tokens > 0 for c in together)
    # One llama_decode per prompt (prefill), then one per step for all four together.
    assert steps <= max(c.completion_tokens for c in together) + len(PROMPTS)


@pytest.fixture(scope="module")
def fresh_backend(smollm2_path: Path) -> Iterator[LlamaCppBackend]:
    """A second engine whose cache is cleared before every request: the fresh-prefill reference."""
    backend = LlamaCppBackend(smollm2_path, name="fresh", context_length=1024, slots=1)
    yield backend
    backend.close()


@pytest.mark.parametrize("persona", ["You are a terse assistant.", "You are a pirate who loves maps."])
def test_continuing_a_conversation_reuses_its_cache_and_matches_a_fresh_prefill(
    smollm2: LlamaCppBackend, fresh_backend: LlamaCppBackend, persona: str
) -> None:
    smollm2.forget_caches()
    history = [Message(role="system", content=persona)]
    for turn, question in enumerate(["Say a colour.", "Now say an animal.", "Combine them in a sentence."]):
        history.append(Message(role="user", content=question))
        request = GenerationRequest(messages=tuple(history), sampling=GREEDY, conversation_key="c1")
        continued = _run(smollm2, [request])[0]
        fresh_backend.forget_caches()
        fresh = _run(fresh_backend, [request])[0]
        assert fresh.cached_prompt_tokens == 0
        if turn > 0:
            assert continued.cached_prompt_tokens > 0, "the conversation's cache must be reused"
        assert continued.text == fresh.text, f"turn {turn}"
        history.append(Message(role="assistant", content=continued.text))


def test_fast_mode_also_reuses_generated_tokens(smollm2_path: Path) -> None:
    backend = LlamaCppBackend(smollm2_path, name="fast", context_length=1024, slots=2, exact_kv=False)
    try:
        history = [Message(role="user", content="Say a colour.")]
        first = _run(backend, [GenerationRequest(messages=tuple(history), sampling=GREEDY, conversation_key="k")])[0]
        history += [Message(role="assistant", content=first.text), Message(role="user", content="And another.")]
        second = _run(backend, [GenerationRequest(messages=tuple(history), sampling=GREEDY, conversation_key="k")])[0]
        # The whole first prompt plus the generated reply (up to its end-of-turn token) came from the cache.
        assert second.cached_prompt_tokens >= first.prompt_tokens + first.completion_tokens - 1
    finally:
        backend.close()


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


def test_requests_sharing_a_long_prefix_prefill_it_once_and_match_fresh(smollm2: LlamaCppBackend) -> None:
    rubric = "You judge short answers. " + " ".join(f"Rule {n}: be fair and brief." for n in range(12))
    requests = [
        GenerationRequest(
            messages=(Message(role="system", content=rubric), Message(role="user", content=f"Answer {n}: {word}.")),
            sampling=GREEDY,
        )
        for n, word in enumerate(["apple", "river", "seven"])
    ]
    alone = []
    for request in requests:
        smollm2.forget_caches()
        alone.append(_run(smollm2, [request])[0])
    smollm2.forget_caches()
    forked_before = smollm2.counters.forked_tokens
    together = _run(smollm2, requests)
    assert [c.text for c in together] == [c.text for c in alone]
    assert together[0].cached_prompt_tokens == 0
    assert all(c.cached_prompt_tokens >= 64 for c in together[1:]), [c.cached_prompt_tokens for c in together]
    assert smollm2.counters.forked_tokens - forked_before == sum(c.cached_prompt_tokens for c in together[1:])


def test_a_sequence_whose_kv_lost_tokens_is_prefilled_again_not_refused(smollm2: LlamaCppBackend) -> None:
    """If a sequence's KV no longer ends where the slot's record says, llama.cpp refuses the next chunk
    as an invalid batch (status -1), which used to end the whole run; the slot is prefilled again instead."""
    import llama_cpp as C

    smollm2.forget_caches()
    (cold,) = _run(smollm2, [_ask(PROMPTS[1], key="conv")])
    follow_up = GenerationRequest(
        messages=(
            Message(role="user", content=PROMPTS[1]),
            Message(role="assistant", content=cold.text),
            Message(role="user", content="And one more."),
        ),
        sampling=GREEDY,
        conversation_key="conv",
    )
    smollm2.forget_caches()
    (reference,) = _run(smollm2, [follow_up])
    smollm2.forget_caches()
    _run(smollm2, [_ask(PROMPTS[1], key="conv")])
    holder = next(slot for slot in smollm2.slots if slot.key == "conv")
    C.llama_memory_seq_rm(smollm2.memory, holder.seq_id, 3, -1)  # the KV loses all but 3 tokens behind its back
    resyncs = smollm2.counters.kv_resyncs
    (recovered,) = _run(smollm2, [follow_up])
    assert smollm2.counters.kv_resyncs == resyncs + 1
    assert recovered.text == reference.text
