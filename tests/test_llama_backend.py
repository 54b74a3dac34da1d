"""The real llama.cpp backend on the embedded SmolLM2: batching and KV reuse change no token."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.catalog.models import load_catalog
from appliance.engine.chat_format import FormattedPrompt
from appliance.engine.chunk_plan import ALIGNED_CHUNK, chunk_plan, reusable_boundary
from appliance.engine.host_cache import DEFAULT_BUDGET_MB, default_budget_mb
from appliance.engine.host_memory import physical_memory_mb, usable_memory_mb
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.types import Completion, GenerationRequest, Message, ResolvedSampling, ScoringRequest
from appliance.errors import ApplianceError

pytestmark = pytest.mark.real_model

REPO = Path(__file__).resolve().parent.parent

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


#: Long enough (over ALIGNED_CHUNK tokens) that exact mode with flash attention has a whole aligned
#: chunk to reuse.
BACKGROUND = (
    " You work in a small museum of old clocks by the harbour. Visitors ask about the exhibits, the opening "
    "hours, the tea room and the ferry timetable; you answer in one short line and never use lists. You like "
    "brass, rain and the smell of oil on gears, and you dislike long speeches."
)


@pytest.mark.parametrize(
    ("persona", "flash"), [("You are a terse assistant.", False), ("You are a pirate who loves maps.", True)]
)
def test_continuing_a_conversation_reuses_its_cache_and_matches_a_fresh_prefill(
    smollm2: LlamaCppBackend, fresh_backend: LlamaCppBackend, smollm2_path: Path, persona: str, flash: bool
) -> None:
    """Flash attention on: the aligned chunks of exact mode keep the continued conversation exact too."""
    continuing, fresh_reference = smollm2, fresh_backend
    if flash:
        continuing = LlamaCppBackend(smollm2_path, name="flash", context_length=1024, slots=4, flash_attention=True)
        fresh_reference = LlamaCppBackend(
            smollm2_path, name="fresh", context_length=1024, slots=1, flash_attention=True
        )
    try:
        continuing.forget_caches()
        history = [Message(role="system", content=persona + BACKGROUND)]
        for turn, question in enumerate(["Say a colour.", "Now say an animal.", "Combine them in a sentence."]):
            history.append(Message(role="user", content=question))
            request = GenerationRequest(messages=tuple(history), sampling=GREEDY, conversation_key="c1")
            continued = _run(continuing, [request])[0]
            fresh_reference.forget_caches()
            fresh = _run(fresh_reference, [request])[0]
            assert fresh.cached_prompt_tokens == 0
            if turn > 0:
                assert continued.cached_prompt_tokens > 0, "the conversation's cache must be reused"
            assert continued.text == fresh.text, f"turn {turn}"
            history.append(Message(role="assistant", content=continued.text))
    finally:
        if flash:
            continuing.close()
            fresh_reference.close()


def test_two_roles_taking_turns_on_one_model_keep_each_others_cache(smollm2_path: Path) -> None:
    """An interrogator and a player on the same model, one request at a time: each one's next turn
    finds its own cache, though the other's request ran in between (it must not overwrite it)."""
    backend = LlamaCppBackend(smollm2_path, name="turns", context_length=1024, slots=4)
    histories = {
        "asker": [Message(role="system", content="You ask short questions about clocks." + BACKGROUND)],
        "answerer": [Message(role="system", content="You answer as a clock maker." + BACKGROUND)],
    }
    reused: dict[str, list[int]] = {"asker": [], "answerer": []}
    try:
        for _ in range(2):
            for role, history in histories.items():
                history.append(Message(role="user", content="Go on."))
                request = GenerationRequest(messages=tuple(history), sampling=GREEDY, conversation_key=role)
                reply = _run(backend, [request])[0]
                reused[role].append(reply.cached_prompt_tokens)
                history.append(Message(role="assistant", content=reply.text))
    finally:
        backend.close()
    # The second turn reuses at least one aligned chunk beyond the few tokens both prompts open with.
    assert all(second >= ALIGNED_CHUNK for _, second in reused.values()), reused


def test_moving_a_cache_aside_never_overwrites_the_cache_a_request_forks(
    smollm2_path: Path, fresh_backend: LlamaCppBackend
) -> None:
    """Two slots: the lowest holds an unrelated conversation, the other (older) holds the prefix the new
    request shares. Moving the unrelated cache aside must not land on that prefix: the request's reply
    equals a fresh prefill's, and it still reuses the shared prefix."""
    backend = LlamaCppBackend(smollm2_path, name="two", context_length=1024, slots=2)
    shared_system = Message(role="system", content="You are a harbour guide." + BACKGROUND)
    other_system = Message(role="system", content="You sort library books by colour." + BACKGROUND[::-1])

    def ask(system: Message, question: str, key: str) -> GenerationRequest:
        return GenerationRequest(
            messages=(system, Message(role="user", content=question)), sampling=GREEDY, conversation_key=key
        )

    try:
        _run(backend, [ask(shared_system, "When does the ferry leave?", "first")])  # slot 0
        _run(backend, [ask(other_system, "Which shelf is blue?", "other")])  # moves it to slot 1, takes slot 0
        request = ask(shared_system, "Where is the tea room?", "third")
        reply = _run(backend, [request])[0]
    finally:
        backend.close()
    fresh_backend.forget_caches()
    fresh = _run(fresh_backend, [request])[0]
    assert reply.cached_prompt_tokens >= ALIGNED_CHUNK
    assert reply.token_ids == fresh.token_ids


@pytest.mark.parametrize("host_cache_mb", [64, 4, 0])
def test_a_conversation_whose_slot_was_taken_is_copied_back_from_host_memory(
    smollm2_path: Path, fresh_backend: LlamaCppBackend, host_cache_mb: int
) -> None:
    """One slot, two conversations taking turns: each request overwrites the other's cache. With a
    host cache the overwritten cache is saved and copied back when its conversation returns, and the
    reply equals a fresh prefill's; without one the conversation is computed again, and the tokens its
    overwritten cache held are counted as evicted. A host cache of 4 MB holds one of the two caches (about
    2 and 3.4 MB): the returning conversation's entry is restored, and the cache its slot held, saved
    last, is the one dropped for the budget and evicted."""
    backend = LlamaCppBackend(smollm2_path, name="one", context_length=1024, slots=1, host_cache_mb=host_cache_mb)
    systems = {
        "museum": Message(role="system", content="You are a museum guide." + BACKGROUND),
        "library": Message(role="system", content="You sort library books by colour." + BACKGROUND[::-1]),
    }
    histories = {key: [system, Message(role="user", content="Hello.")] for key, system in systems.items()}
    first_prompt: dict[str, int] = {}
    try:
        for key, history in histories.items():
            reply = _run(backend, [GenerationRequest(messages=tuple(history), sampling=GREEDY, conversation_key=key)])
            first_prompt[key] = reply[0].prompt_tokens
            history += [Message(role="assistant", content=reply[0].text), Message(role="user", content="Go on.")]
        request = GenerationRequest(messages=tuple(histories["museum"]), sampling=GREEDY, conversation_key="museum")
        returned = _run(backend, [request])[0]
        counters = backend.counters
    finally:
        backend.close()
    fresh_backend.forget_caches()
    fresh = _run(fresh_backend, [request])[0]
    assert returned.token_ids == fresh.token_ids
    if host_cache_mb == 4:
        assert counters.saved_caches == 2
        assert returned.cached_prompt_tokens == counters.restored_tokens == first_prompt["museum"]
        assert counters.evicted_tokens == first_prompt["library"]
    elif host_cache_mb:
        assert counters.saved_caches >= 1
        # exact mode reuses the first prompt whole (the decoded reply is computed again)
        assert returned.cached_prompt_tokens == counters.restored_tokens == first_prompt["museum"]
        assert 0 < counters.host_cache_peak_bytes <= host_cache_mb * 2**20
        assert counters.evicted_tokens == 0
    else:
        assert counters.saved_caches == counters.restored_tokens == 0
        assert returned.cached_prompt_tokens < ALIGNED_CHUNK
        # both first prompts were prefilled whole, share no chunk, and were overwritten by the other
        assert counters.evicted_tokens == first_prompt["museum"] + first_prompt["library"]


def test_a_model_without_host_cache_mb_gets_4096_mb_or_a_quarter_of_the_machines_memory(
    fresh_backend: LlamaCppBackend,
) -> None:
    """The default budget: 4,096 MB (what the 64-conversation point needed to cost per conversation
    what 16 do), capped at a quarter of physical memory on small machines."""
    assert default_budget_mb(65_536) == DEFAULT_BUDGET_MB == 4_096
    assert default_budget_mb(8_192) == 2_048
    assert fresh_backend.host_cache is not None
    assert fresh_backend.host_cache.budget_bytes == default_budget_mb() * 2**20 > 0


def test_a_containers_memory_limit_caps_the_memory_the_default_host_cache_is_sized_from(tmp_path: Path) -> None:
    """A lab's container sees the host's RAM through sysconf; its cgroup limit is what it may use."""
    physical = physical_memory_mb()
    assert physical is not None and physical > 2_048
    limited, unlimited, missing = tmp_path / "limited", tmp_path / "unlimited", tmp_path / "missing"
    limited.write_text(f"{2**31}\n")
    unlimited.write_text("max\n")
    assert usable_memory_mb([missing, limited]) == 2_048
    assert usable_memory_mb([unlimited, limited]) == physical  # the first file found decides
    assert usable_memory_mb([missing]) == physical


@pytest.mark.parametrize("model", ["smollm2-135m", "gemma3-270m"])
def test_a_copied_cache_is_in_place_before_its_state_is_saved(model: str) -> None:
    """llama.cpp's seq_cp across streams only queues the copy for the next llama_decode, and the host
    cache reads and writes states between decodes. SmolLM2's caches are copied through host memory, at
    once; Gemma 3's (a sliding window) by the queued stream copy, which the backend carries out before
    any state is read. Either way the copy's state, saved and restored elsewhere, continues exactly
    like the source, although the copy's stream held another text before (its stale KV would differ)."""
    import llama_cpp as C
    import numpy as np

    from appliance.engine.llama_native import read_sequence_state

    backend = LlamaCppBackend(_model_path(model), name=model, context_length=1024, slots=3, chat_format="plain")
    try:
        assert backend.caches.stream_copies == (model == "gemma3-270m")
        source, copy, elsewhere = backend.slots
        _run(backend, [GenerationRequest(prompt=BACKGROUND[::-1], sampling=GREEDY)])  # slot 0: another text
        backend.caches.copy(backend.slots[0], copy)
        backend.forget_caches()
        _run(backend, [GenerationRequest(prompt="Name a fruit that is yellow." + BACKGROUND, sampling=GREEDY)])
        assert source.cached and not copy.cached
        backend.caches.copy(source, copy)
        backend.caches.flush_copies()
        state, written = read_sequence_state(backend.context, copy.seq_id)
        assert C.llama_state_seq_set_data(backend.context, state, written, elsewhere.seq_id) == written
        end = len(source.cached)
        continuation = backend.model.tokenize(" and the tea room opens at nine", parse_special=False, add_bos=False)

        def next_logits(seq_id: int) -> np.ndarray:
            backend.batch.clear()
            for offset, token in enumerate(continuation):
                backend.batch.add(token, end + offset, seq_id, offset == len(continuation) - 1)
            assert C.llama_decode(backend.context, backend.batch.raw) == 0
            return backend.model.logits_row(backend.context, len(continuation) - 1)

        assert np.array_equal(next_logits(elsewhere.seq_id), next_logits(source.seq_id))
    finally:
        backend.close()


def _model_path(name: str) -> Path:
    catalog = load_catalog(REPO / "models.toml")
    return catalog.resolve_path(catalog.get(name))


@pytest.mark.parametrize(("model", "chat_format"), [("smollm2-135m", "gguf"), ("gemma3-270m", "plain")])
def test_chat_requests_reuse_up_to_where_their_messages_part_and_match_a_fresh_prefill(
    model: str, chat_format: str
) -> None:
    """Exact mode cuts a chat prompt where each earlier message leaves off. Questions that share a
    system prompt fork it right where they part, not at the last multiple of 64 before it, and a
    conversation's next turn reuses its previous prompt whole (only the decoded reply is computed
    again). Every reply equals a fresh prefill's: the cuts depend on the request alone."""
    path = _model_path(model)
    backend = LlamaCppBackend(path, name=model, context_length=1024, slots=4, chat_format=chat_format)
    fresh = LlamaCppBackend(path, name="fresh", context_length=1024, slots=1, chat_format=chat_format)
    system = Message(role="system", content="You are a harbour guide." + BACKGROUND)
    try:
        only_system = len(backend.request_reads(GenerationRequest(messages=(system,)))[0])
        assert only_system % ALIGNED_CHUNK > 3, "the test needs a system prompt that ends well past a chunk end"
        replies = []
        for question in ["When does the ferry leave?", "Where is the tea room?"]:
            request = GenerationRequest(messages=(system, Message(role="user", content=question)), sampling=GREEDY)
            replies.append(_run(backend, [request])[0])
            fresh.forget_caches()
            assert replies[-1].token_ids == _run(fresh, [request])[0].token_ids, question
        # the second question forks the first one's cache past the system prompt's last aligned chunk
        assert replies[1].cached_prompt_tokens > only_system // ALIGNED_CHUNK * ALIGNED_CHUNK
        history = [system, Message(role="user", content="Say a colour.")]
        first = _run(backend, [GenerationRequest(messages=tuple(history), sampling=GREEDY, conversation_key="c")])[0]
        history += [Message(role="assistant", content=first.text), Message(role="user", content="And an animal?")]
        request = GenerationRequest(messages=tuple(history), sampling=GREEDY, conversation_key="c")
        second = _run(backend, [request])[0]
        fresh.forget_caches()
        assert second.token_ids == _run(fresh, [request])[0].token_ids
        assert second.cached_prompt_tokens == first.prompt_tokens
    finally:
        backend.close()
        fresh.close()


def test_a_chat_template_that_refuses_a_requests_leading_messages_costs_only_the_cut(
    smollm2: LlamaCppBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A template may refuse a conversation's first messages alone (roles that must alternate): the
    request is served as before, without a cut there."""
    original = smollm2.formatter

    class RefusesAlone:
        def render(self, messages: Sequence[Message]) -> FormattedPrompt:
            if len(messages) < 2:
                raise ApplianceError("roles must alternate")
            return original.render(messages)

    monkeypatch.setattr(smollm2, "formatter", RefusesAlone())
    smollm2.forget_caches()
    request = GenerationRequest(
        messages=(Message(role="system", content="You are terse."), Message(role="user", content=PROMPTS[0])),
        sampling=GREEDY,
    )
    reply = _run(smollm2, [request])[0]
    monkeypatch.setattr(smollm2, "formatter", original)
    smollm2.forget_caches()
    assert reply.finish_reason != "error" and reply.token_ids == _run(smollm2, [request])[0].token_ids


@pytest.mark.parametrize("slots", [2, 1])
def test_a_sliding_window_cache_serves_a_cut_prefix_only_where_it_holds_the_window(slots: int) -> None:
    """Gemma 3 attends the last 512 positions in most layers, and llama.cpp's serialised copy of a
    sequence keeps only the 512 before its end. A cache copied that way and cut back to a shared
    prefix gave other numbers than a cold prefill (up to 5 in a logit). Two slots: the first text's
    cache is moved aside for another text and forked back by stream copies, which hold every
    position: the shared prefix is reused. One slot: the cache is saved to host memory, which cannot
    serve the cut: the prefix is computed again. Either way the numbers are a cold prefill's."""
    path = _model_path("gemma3-270m")
    context = " ".join(f"At {n % 12 + 1} o'clock the ferry number {n} left the harbour." for n in range(50))
    first, second = (
        GenerationRequest(prompt=context, scoring=ScoringRequest(continuation=text), conversation_key=key)
        for key, text in (("tea", " The tea room opened at nine and closed at noon, every day."), ("no", " Nobody."))
    )
    other = GenerationRequest(
        prompt=BACKGROUND * 2, scoring=ScoringRequest(continuation=" Fine."), conversation_key="b"
    )
    backend = LlamaCppBackend(path, name="gemma", context_length=1024, slots=slots, chat_format="plain")
    cold = LlamaCppBackend(path, name="cold", context_length=1024, slots=1, host_cache_mb=0, chat_format="plain")
    try:
        scored_first = _run(backend, [first])[0]
        assert scored_first.prompt_tokens > backend.caches.window + 2 * ALIGNED_CHUNK
        _run(backend, [other])
        if slots == 2:
            assert backend.counters.moved_caches == 1
        else:
            assert backend.counters.saved_caches == 1
        warm = _run(backend, [second])[0]
        alone = _run(cold, [second])[0]
    finally:
        backend.close()
        cold.close()
    assert warm.scores == alone.scores
    if slots == 2:
        assert warm.cached_prompt_tokens >= backend.caches.window
    else:
        assert warm.cached_prompt_tokens == 0


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


def test_fast_mode_packs_every_prefill_and_the_decode_tokens_into_one_call(
    smollm2: LlamaCppBackend, smollm2_path: Path
) -> None:
    """Fast mode computes newcomers' prompts beside the running sequences' tokens, one llama_decode a
    step (a GPU pays milliseconds a call); the scored rows of a packed scoring request are read at
    their own batch rows, so its numbers match exact mode's on a prompt computed alone."""
    sampling = ResolvedSampling(temperature=0.0, max_tokens=4, ignore_eos=True)
    scored = GenerationRequest(
        prompt="The ferry left the harbour at nine.", scoring=ScoringRequest(continuation=" It was late.")
    )
    backend = LlamaCppBackend(smollm2_path, name="fast", context_length=512, slots=4, exact_kv=False)
    try:
        tickets = [backend.submit(_ask(prompt, sampling=sampling)) for prompt in PROMPTS[:2]]
        calls = backend.counters.decode_calls
        done = dict(backend.step())  # both prompts in one call
        assert backend.counters.decode_calls == calls + 1
        tickets += [backend.submit(_ask(PROMPTS[2], sampling=sampling)), backend.submit(scored)]
        done.update(backend.step())  # two decode tokens, a prompt and the scored text: one call
        assert backend.counters.decode_calls == calls + 2
        assert tickets[3] in done  # the scoring request finished within that call
        while backend.busy:
            done.update(backend.step())
        assert backend.counters.decode_calls == calls + 5  # three more steps finish the late prompt's reply
    finally:
        backend.close()
    assert [done[ticket].completion_tokens for ticket in tickets[:3]] == [4, 4, 4]
    smollm2.forget_caches()
    alone = _run(smollm2, [scored])[0]
    packed = done[tickets[3]].scores
    assert packed is not None and alone.scores is not None
    assert packed.token_logprobs == pytest.approx(alone.scores.token_logprobs, abs=1e-3)


def test_greedy_selection_is_llama_cpps_greedy_sampler(smollm2_path: Path) -> None:
    """Plain greedy requests take one argmax instead of llama.cpp's sampler (which fills a record per
    vocabulary entry): the same token on every logits row of real prompts."""
    import llama_cpp as C

    from appliance.engine.llama_native import LlamaModel, TokenBatch, greedy_token

    model = LlamaModel.shared(smollm2_path, "smollm2-135m")
    params = C.llama_context_default_params()
    params.n_ctx, params.n_seq_max, params.no_perf = 512, len(PROMPTS), True
    context = C.llama_init_from_model(model.handle, params)
    batch, greedy = TokenBatch(512), C.llama_sampler_init_greedy()
    compared = 0
    try:
        for seq, prompt in enumerate(PROMPTS):
            tokens = model.tokenize(prompt, parse_special=True)
            batch.clear()
            indices = [batch.add(token, position, seq, True) for position, token in enumerate(tokens)]
            assert C.llama_decode(context, batch.raw) == 0
            for index in indices:
                assert greedy_token(context, index, model.n_vocab) == C.llama_sampler_sample(greedy, context, index)
                compared += 1
    finally:
        C.llama_sampler_free(greedy)
        batch.close()
        C.llama_free(context)
        model.close()
    assert compared > 20


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
    (cold,) = _run(smollm2, [_ask(PROMPTS[1] + BACKGROUND, key="conv")])
    follow_up = GenerationRequest(
        messages=(
            Message(role="user", content=PROMPTS[1] + BACKGROUND),
            Message(role="assistant", content=cold.text),
            Message(role="user", content="And one more."),
        ),
        sampling=GREEDY,
        conversation_key="conv",
    )
    smollm2.forget_caches()
    (reference,) = _run(smollm2, [follow_up])
    smollm2.forget_caches()
    _run(smollm2, [_ask(PROMPTS[1] + BACKGROUND, key="conv")])
    holder = next(slot for slot in smollm2.slots if slot.key == "conv")
    C.llama_memory_seq_rm(smollm2.memory, holder.seq_id, 3, -1)  # the KV loses all but 3 tokens behind its back
    resyncs = smollm2.counters.kv_resyncs
    (recovered,) = _run(smollm2, [follow_up])
    assert smollm2.counters.kv_resyncs == resyncs + 1
    assert recovered.text == reference.text


def test_a_grammar_is_applied_only_when_a_sampled_token_breaks_it(smollm2_path: Path) -> None:
    """Sample first, check the token, constrain on failure: greedy replies equal grammar-first sampling's,
    every reply fits the grammar, and the grammar really had to step in."""
    import re

    grammar = 'root ::= "Verdict: " ("yes" | "no") ". Because " [a-z ]{1,30} "."'
    pattern = re.compile(r"Verdict: (yes|no)\. Because [a-z ]{1,30}\.")
    questions = ["Is the sea salty?", "Can a cat fly?", "Is two more than three?"]
    seeded = ResolvedSampling(temperature=0.9, top_k=40, max_tokens=48, seed=7)  # room for 30 letters
    replies: dict[bool, list[str]] = {}
    rejections: dict[bool, int] = {}
    for lazy in (True, False):
        backend = LlamaCppBackend(smollm2_path, name="judge", context_length=512, slots=4, lazy_grammar=lazy)
        try:
            requests = [
                GenerationRequest(messages=(Message(role="user", content=q),), sampling=s, grammar=grammar)
                for q in questions
                for s in (GREEDY.model_copy(update={"max_tokens": 48}), seeded)
            ]
            done = _run(backend, requests)
            replies[lazy] = [c.text for c in done]
            rejections[lazy] = backend.counters.grammar_rejections
            generated = sum(c.completion_tokens for c in done)
        finally:
            backend.close()
        assert all(pattern.fullmatch(text) for text in replies[lazy]), replies[lazy]
    assert replies[True][0::2] == replies[False][0::2]  # greedy: the same tokens either way
    assert rejections[False] == 0 and 0 < rejections[True] < generated


@given(
    length=st.integers(min_value=1, max_value=400),
    declared=st.lists(st.integers(min_value=0, max_value=400), max_size=3),
    other=st.lists(st.integers(min_value=0, max_value=400), max_size=3),
    shared=st.integers(min_value=0, max_value=400),
)
def test_chunk_plans_are_cut_the_same_way_wherever_a_cache_is_reused(
    length: int, declared: list[int], other: list[int], shared: int
) -> None:
    """Exact mode's plans: contiguous chunks of two or more tokens ending at the prompt's end, every
    aligned boundary kept unless it would leave a lone token; a cache is reused only up to a chunk end
    that both plans share with identical chunks before it."""
    plan = chunk_plan(length, declared)
    assert plan == sorted(set(plan)) and plan[-1] == length
    starts = [0, *plan[:-1]]
    assert all(end - start >= 2 for start, end in zip(starts, plan, strict=True)) or length == 1
    assert {end for end in range(ALIGNED_CHUNK, length - 1, ALIGNED_CHUNK)} <= set(plan) | {e - 1 for e in plan}
    cached = chunk_plan(length, other)
    reused = reusable_boundary(cached, plan, min(shared, length))
    assert reused <= shared and (reused == 0 or (reused in plan and reused in cached))
    assert [e for e in plan if e <= reused] == [e for e in cached if e <= reused]
    assert reusable_boundary(plan, plan, length) == length  # the same prompt reuses everything


def test_the_install_check_runs_the_build_without_amx() -> None:
    """`make install` trusts this check to catch a llama.cpp build that dies on this CPU (SIGILL in
    llama.cpp's AMX matrix multiply on an Intel machine here): it must decode, and the build must
    be the one the Makefile asks for, without AMX."""
    done = subprocess.run(
        [sys.executable, "-m", "appliance.engine.build_check"], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "runs on this CPU" in done.stdout
    assert "AMX_INT8 = 1" not in done.stdout, done.stdout
