"""The transformers backend on CPU, loading the embedded SmolLM2 GGUF (through the float32 folder
dequantised from it once).

transformers dequantises the Q4_1 weights to float32, so its numbers are not
llama.cpp's: greedy texts are compared and the agreement rate is printed,
while the assertions are the ones that must hold whatever the rate.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.engine.backend import Backend
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.types import Completion, GenerationRequest, Message, ResolvedSampling
from appliance.judging.templates import RatingTemplate, YesNoTemplate
from tests.fakes import drain

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(
        importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None,
        reason="torch/transformers not installed (pip install -e '.[hf]')",
    ),
]

PROMPTS = ["Name a fruit that is yellow.", "What is two plus three?", "Give me a name for a cat.", "Say hello."]
GREEDY = ResolvedSampling(temperature=0.0, max_tokens=12)


@pytest.fixture(scope="module")
def hf_backend(smollm2_path: Path) -> Iterator[Backend]:
    from appliance.engine.transformers_backend import TransformersBackend

    backend = TransformersBackend(smollm2_path, name="smollm2-hf", slots=4)
    yield backend
    backend.close()


def test_batched_generation_equals_one_at_a_time(hf_backend: Backend) -> None:
    """Continuous batching: the same greedy text whether a request runs alone, with others from the
    start, or joins while others are decoding (padding is masked out of attention)."""
    requests = [GenerationRequest(messages=(Message(role="user", content=p),), sampling=GREEDY) for p in PROMPTS]
    together = drain(hf_backend, requests)
    alone = [drain(hf_backend, [request])[0] for request in requests]
    assert all(c.completion_tokens > 0 and c.text for c in together)
    assert [c.text for c in together] == [c.text for c in alone]
    # staggered: two start, the others join after three decode steps
    tickets = [hf_backend.submit(request) for request in requests[:2]]
    done: dict[int, Completion] = {}
    for _ in range(3):
        done.update(hf_backend.step())
    tickets += [hf_backend.submit(request) for request in requests[2:]]
    while hf_backend.busy:
        done.update(hf_backend.step())
    assert [done[t].text for t in tickets] == [c.text for c in alone]


def test_a_conversation_keeps_its_cache_between_turns(hf_backend: Backend) -> None:
    """The second turn prefills only what follows the first turn's tokens, and says the same as a cold start."""
    first = (Message(role="user", content="Name a fruit that is yellow."),)
    reply = drain(hf_backend, [GenerationRequest(messages=first, sampling=GREEDY, conversation_key="c1")])[0]
    second = (
        *first,
        Message(role="assistant", content=reply.text),
        Message(role="user", content="And one that is red?"),
    )
    warm = drain(hf_backend, [GenerationRequest(messages=second, sampling=GREEDY, conversation_key="c1")])[0]
    cold = drain(hf_backend, [GenerationRequest(messages=second, sampling=GREEDY, conversation_key="other")])[0]
    assert cold.cached_prompt_tokens == 0
    assert warm.cached_prompt_tokens > reply.prompt_tokens // 2, (warm.cached_prompt_tokens, reply.prompt_tokens)
    assert warm.text == cold.text and warm.prompt_tokens == cold.prompt_tokens


def test_sampled_replies_do_not_depend_on_the_batch(hf_backend: Backend) -> None:
    """Each sequence draws from its own seeded generator."""
    sampled = GREEDY.model_copy(update={"temperature": 0.9, "top_p": 0.95, "seed": 11})
    requests = [GenerationRequest(messages=(Message(role="user", content=p),), sampling=sampled) for p in PROMPTS]
    together = drain(hf_backend, requests)
    alone = drain(hf_backend, [requests[2]])[0]
    assert together[2].text == alone.text


def test_greedy_agreement_with_llama_cpp_is_measured(hf_backend: Backend, smollm2: LlamaCppBackend) -> None:
    requests = [GenerationRequest(messages=(Message(role="user", content=p),), sampling=GREEDY) for p in PROMPTS]
    ours = drain(hf_backend, requests)
    smollm2.forget_caches()
    reference = drain(smollm2, requests)
    exact = sum(a.text.strip() == b.text.strip() for a, b in zip(ours, reference, strict=True))
    first_word = sum(a.text.split()[:1] == b.text.split()[:1] for a, b in zip(ours, reference, strict=True))
    print(f"\ntransformers vs llama_cpp greedy: {exact}/{len(PROMPTS)} identical, {first_word} same first word")
    for a, b in zip(ours, reference, strict=True):
        print(f"  hf: {a.text!r}\n  lc: {b.text!r}")
    assert all(c.prompt_tokens == r.prompt_tokens for c, r in zip(ours, reference, strict=True)), (
        "both backends must see the same chat-formatted prompt"
    )
    assert first_word >= len(PROMPTS) // 2


def test_both_backends_count_tokens_with_the_models_tokenizer(hf_backend: Backend, smollm2: LlamaCppBackend) -> None:
    """Games size reply caps with `count_tokens`: the same GGUF's tokenizer gives the same count either way."""
    texts = ["explanation: a short sentence\nguess: crane", "X ▢ ▢ ▢ X\n▢ X ▢ X ▢", "意气风发", ""]
    counts = [(hf_backend.count_tokens(text), smollm2.count_tokens(text)) for text in texts]
    assert all(hf == llama for hf, llama in counts), counts
    assert counts[0][0] > 5 and counts[-1][0] == 0


def test_scoring_requests_read_the_same_text_as_llama_cpp_and_do_not_depend_on_the_batch(
    hf_backend: Backend, smollm2: LlamaCppBackend
) -> None:
    """Float32 weights against Q4_1: the log-probabilities are close, not equal; batching changes nothing."""
    from appliance.engine.types import ScoringRequest

    requests = [
        GenerationRequest(prompt="User: Hi there!\nSystem:", scoring=ScoringRequest(continuation=text, choices=("1",)))
        for text in (" Hello, how are you?", " Banana truck sky.")
    ]
    together = drain(hf_backend, requests)
    alone = [drain(hf_backend, [request])[0] for request in requests]
    reference = drain(smollm2, requests)
    assert [c.scores for c in together] == [c.scores for c in alone]
    for ours, theirs in zip(together, reference, strict=True):
        assert ours.scores is not None and theirs.scores is not None
        assert len(ours.scores.token_logprobs) == len(theirs.scores.token_logprobs)
        assert abs(ours.scores.mean - theirs.scores.mean) < 0.5, (ours.scores.mean, theirs.scores.mean)
    fluent, nonsense = (c.scores.mean for c in together if c.scores is not None)
    assert fluent > nonsense  # the model finds the greeting likelier than the word salad


def test_a_gguf_is_parsed_once_for_its_conversion_and_a_broken_one_is_one_line(
    smollm2_path: Path, tmp_path: Path
) -> None:
    """transformers opens a GGUF's reader three times (config, tokenizer, weights); each parse of
    Gemma's vocabulary took 18 s here, so the conversion hands them all one reader."""
    import gguf

    from appliance.engine.hf_loading import _parsed_once, load_pretrained
    from appliance.errors import ApplianceError

    reader_class = gguf.GGUFReader
    with _parsed_once("smollm2", smollm2_path) as reader:
        assert gguf.GGUFReader(str(smollm2_path)) is reader
        assert gguf.GGUFReader(smollm2_path) is reader
    assert gguf.GGUFReader is reader_class
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(ApplianceError) as raised:
        load_pretrained(None, "broken", broken, {})
    assert str(raised.value).startswith(f"model 'broken': transformers could not load {broken}: ")
    assert "\n" not in str(raised.value)


@pytest.mark.skipif(importlib.util.find_spec("xgrammar") is None, reason="xgrammar not installed (vLLM brings it)")
def test_our_gbnf_grammars_constrain_transformers_replies(hf_backend: Backend) -> None:
    """The judges' own grammars, through xgrammar: a yes/no verdict and a rating with a short explanation
    first (a bounded repetition), in one batch, each parsed by its template (sampled replies under a grammar:
    tests/test_backend_contract.py)."""
    yes_no = YesNoTemplate(name="y", system="s", user="u")
    rating = RatingTemplate(name="r", system="s", user="u", reasoning_chars=24, max_tokens=48)
    greedy = ResolvedSampling(temperature=0.0, max_tokens=48)
    requests = [
        GenerationRequest(messages=(Message(role="user", content=text),), sampling=greedy, grammar=grammar)
        for text, grammar in (
            ("Is the sky blue? Answer in JSON.", yes_no.grammar()),
            ("Rate this reply to 'pwd': /home/user", rating.grammar()),
        )
    ]
    answer, rated = drain(hf_backend, requests)
    assert yes_no.parse(answer.text) is not None and answer.finish_reason == "stop", answer.text
    assert rating.parse(rated.text) is not None and rated.text.startswith('{"reasoning": "'), rated.text
