"""Scored logits rows computed on the host (`host_logits`): the product's rows are independent of the
rows beside them, and on the real model a stopped call leaves the same cache and scores stay exact."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.engine.host_logits import ROWS_PER_PRODUCT, OutputMatrix
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.types import GenerationRequest, ResolvedSampling, ScoredText, ScoringRequest
from appliance.errors import ApplianceError
from tests.test_scoring_judges import CONTEXT, run_all

_RNG = np.random.default_rng(7)
#: a small output matrix of a real width: the product's kernel is chosen by its shape, not its height
_MATRIX = OutputMatrix((_RNG.standard_normal((4096, 576)) * 0.05).astype(np.float32))
_STATES = _RNG.standard_normal((3 * ROWS_PER_PRODUCT, 576)).astype(np.float32)


def _logits(rows: np.ndarray) -> np.ndarray:
    return np.concatenate([logits for _, logits in _MATRIX.logits(rows)])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, len(_STATES) - 1), min_size=1, max_size=2 * ROWS_PER_PRODUCT + 3))
def test_a_rows_logits_do_not_depend_on_the_rows_beside_it(picked: list[int]) -> None:
    """Whatever rows share the products (one, a full product plus one, ...), each row's logits are those
    it gets beside a single other row, bit for bit."""
    alone = {index: _logits(_STATES[[index]])[0] for index in set(picked)}
    together = _logits(_STATES[picked])
    assert together.shape == (len(picked), 4096)
    for index, row in zip(picked, together, strict=True):
        assert np.array_equal(row, alone[index])


def test_a_lone_row_is_never_multiplied_alone() -> None:
    """One row in a product goes through the matrix-vector kernel, which sums in another order."""
    sizes = [len(logits) for _, logits in _MATRIX.logits(_STATES[: ROWS_PER_PRODUCT + 1])]
    assert sizes == [ROWS_PER_PRODUCT - 1, 2]
    assert [len(logits) for _, logits in _MATRIX.logits(_STATES[:1])] == [1]


@pytest.fixture(scope="module")
def host(smollm2_path: Path) -> Iterator[LlamaCppBackend]:
    backend = LlamaCppBackend(smollm2_path, name="smollm2-135m", context_length=1024, slots=4, host_logits=True)
    yield backend
    backend.close()


REPLY = " I was a little scared, but it stayed far away."
FOLLOWUPS = [" Thanks, that helps!", " You ignored my question.", " Wow!"]


def _judged() -> list[GenerationRequest]:
    extends = ScoredText(prompt=CONTEXT, continuation=REPLY)
    return [GenerationRequest(prompt=CONTEXT, scoring=ScoringRequest(continuation=REPLY))] + [
        GenerationRequest(
            prompt=CONTEXT + REPLY + "\nUser:", scoring=ScoringRequest(continuation=text, extends=extends)
        )
        for text in FOLLOWUPS
    ]


def test_host_scores_are_exact_and_close_to_llama_cpps(host: LlamaCppBackend, smollm2: LlamaCppBackend) -> None:
    """A reply and its follow-ups scored together equal each scored alone from a cold cache; the numbers are
    llama.cpp's to within its 8-bit quantisation of the hidden state, and not the same numbers."""
    host.forget_caches()
    together = run_all(host, _judged())
    for request, completion in zip(_judged(), together, strict=True):
        host.forget_caches()
        assert run_all(host, [request])[0].scores == completion.scores
    smollm2.forget_caches()
    llama = run_all(smollm2, _judged())
    ours = np.concatenate([c.scores.token_logprobs for c in together if c.scores is not None])
    theirs = np.concatenate([c.scores.token_logprobs for c in llama if c.scores is not None])
    assert len(ours) == len(theirs) > len(FOLLOWUPS)
    assert np.abs(ours - theirs).max() < 0.5 and not np.array_equal(ours, theirs)


def test_a_stopped_call_leaves_the_cache_a_whole_call_leaves(host: LlamaCppBackend, smollm2: LlamaCppBackend) -> None:
    """A generation that reuses a scored prompt's cache (computed in calls stopped at the final norm)
    writes what it writes after a whole call's cache: the stopped calls wrote every layer's K and V."""
    greedy = ResolvedSampling(temperature=0.0, max_tokens=12)
    prompt = CONTEXT + REPLY + "\nUser:"
    generation = GenerationRequest(prompt=prompt + " Tell me more about the bear.\nSystem:", sampling=greedy)
    texts = []
    for backend in (host, smollm2):
        backend.forget_caches()
        scored = run_all(backend, [GenerationRequest(prompt=prompt, scoring=ScoringRequest(continuation=" Wow!"))])[0]
        generated = run_all(backend, [generation])[0]
        assert generated.cached_prompt_tokens >= 64 and scored.scores is not None
        texts.append(generated.token_ids)
    assert texts[0] == texts[1] and len(texts[0]) > 0


def test_host_logits_needs_exact_mode(smollm2_path: Path) -> None:
    with pytest.raises(ApplianceError, match="host_logits needs exact_kv = true"):
        LlamaCppBackend(smollm2_path, name="smollm2-135m", slots=1, exact_kv=False, host_logits=True)
