"""The vLLM backend, for GPU machines: whole batches through `LLM.generate`.

vLLM is an optional extra (`pip install -e '.[gpu]'`), imported only when a
model in models.toml uses it; it needs an NVIDIA GPU and cannot be installed
on CPU-only machines. Prefix caching is on, so shared prefixes and earlier
turns are not recomputed; constrained roles get the request's GBNF grammar as
a structured-output constraint; `tensor_parallel_size` spreads a model over
several GPUs. Each step sends every queued request to vLLM at once and lets
its own scheduler batch them continuously.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from appliance.catalog import Catalog, ModelSpec
from appliance.engine.backend import BackendCounters
from appliance.engine.chat_format import render_with_tokenizer
from appliance.engine.registry import register_backend
from appliance.engine.scoring import ScoringError, plan_with_tokenizer, refused_scoring, scored_completion
from appliance.engine.types import Completion, GenerationRequest, ResolvedSampling
from appliance.errors import ApplianceError


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError:
        raise ApplianceError(
            "the vllm backend needs vLLM and an NVIDIA GPU: pip install -e '.[gpu]' on a GPU machine"
        ) from None
    return vllm


def _structured(vllm: Any, grammar: str) -> dict[str, Any]:
    """Newer vLLM takes `structured_outputs`, older `guided_decoding`."""
    sampling_module = vllm.sampling_params
    if hasattr(sampling_module, "StructuredOutputsParams"):
        return {"structured_outputs": sampling_module.StructuredOutputsParams(grammar=grammar)}
    return {"guided_decoding": sampling_module.GuidedDecodingParams(grammar=grammar)}


def vllm_parallelism(spec: ModelSpec) -> dict[str, Any]:
    """models.toml's parallelism options as vLLM's engine arguments (vLLM's defaults where unset).
    Tensor parallelism splits each layer over GPUs, pipeline parallelism the layers into stages; over
    several machines vLLM places them on a Ray cluster (docs/engine.md, "GPUs")."""
    options = {
        "tensor_parallel_size": spec.tensor_parallel_size,
        "pipeline_parallel_size": spec.pipeline_parallel_size,
        "gpu_memory_utilization": spec.gpu_memory_utilization,
    }
    return {name: value for name, value in options.items() if value is not None}


class VllmBackend:
    def __init__(self, path: Path, spec: ModelSpec) -> None:
        self.vllm = _import_vllm()
        try:
            import torch

            has_gpu = bool(torch.cuda.is_available())
        except ImportError:
            has_gpu = False
        if not has_gpu:
            raise ApplianceError(f"model '{spec.name}': the vllm backend needs a CUDA GPU and none is visible")
        if not path.exists():
            raise ApplianceError(f"model '{spec.name}': {path} not found")
        self.name = spec.name
        self.llm = self.vllm.LLM(
            model=str(path),
            max_model_len=spec.context_length,
            enable_prefix_caching=True,
            max_num_seqs=spec.slots,
            **vllm_parallelism(spec),
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.use_template = spec.chat_format == "gguf" and bool(getattr(self.tokenizer, "chat_template", None))
        self.queue: list[tuple[int, GenerationRequest, float]] = []
        self.counters = BackendCounters()
        self._next_ticket = 0

    def submit(self, request: GenerationRequest) -> int:
        ticket = self._next_ticket
        self._next_ticket += 1
        self.queue.append((ticket, request, time.perf_counter()))
        self.counters.requests += 1
        return ticket

    @property
    def busy(self) -> bool:
        return bool(self.queue)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def _prompt(self, request: GenerationRequest) -> tuple[str, tuple[str, ...]]:
        return render_with_tokenizer(self.tokenizer, self.use_template, request)

    def _sampling(self, sampling: ResolvedSampling, stops: tuple[str, ...], grammar: str | None) -> Any:
        extra = _structured(self.vllm, grammar) if grammar is not None else {}
        return self.vllm.SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1,
            min_p=sampling.min_p,
            repetition_penalty=sampling.repeat_penalty,
            max_tokens=sampling.max_tokens,
            stop=list(stops),
            seed=sampling.seed,
            ignore_eos=sampling.ignore_eos,
            **extra,
        )

    def step(self) -> list[tuple[int, Completion]]:
        scoring = [entry for entry in self.queue if entry[1].scoring is not None]
        batch = [entry for entry in self.queue if entry[1].scoring is None]
        self.queue = []
        results = [(ticket, self._score(request, submitted)) for ticket, request, submitted in scoring]
        if not batch:
            return results
        prompts = [self._prompt(request) for _, request, _ in batch]
        params = [
            self._sampling(request.sampling, stops, request.grammar)
            for (_, request, _), (_, stops) in zip(batch, prompts, strict=True)
        ]
        outputs = self.llm.generate([text for text, _ in prompts], params, use_tqdm=False)
        self.counters.decode_calls += 1
        for (ticket, _, submitted), output in zip(batch, outputs, strict=True):
            choice = output.outputs[0]
            cached = int(getattr(output, "num_cached_tokens", 0) or 0)
            completion = Completion(
                text=choice.text,
                finish_reason="stop" if choice.finish_reason == "stop" else "length",
                prompt_tokens=len(output.prompt_token_ids),
                cached_prompt_tokens=cached,
                completion_tokens=len(choice.token_ids),
                token_ids=tuple(choice.token_ids),
                latency_s=time.perf_counter() - submitted,
            )
            self.counters.prompt_tokens += completion.prompt_tokens
            self.counters.cached_prompt_tokens += cached
            self.counters.completion_tokens += completion.completion_tokens
            results.append((ticket, completion))
        return results

    def _score(self, request: GenerationRequest, submitted: float) -> Completion:
        """Through vLLM's prompt log-probabilities: the continuation's come from one prompt; each choice
        is appended as one more prompt token (prefix caching serves the shared part)."""
        assert request.scoring is not None
        text = request.prompt if request.prompt is not None else self._prompt(request)[0]
        try:
            plan = plan_with_tokenizer(self.tokenizer, text, request.prompt is not None, request.scoring)
        except ScoringError as error:
            return refused_scoring(self.name, error, submitted)
        params = self.vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0)
        variants = [plan.tokens, *([*plan.tokens, choice] for choice in plan.choices)]
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in variants], params, use_tqdm=False)

        def logprob(output: Any, position: int, token: int) -> float:
            return float(output.prompt_logprobs[position][token].logprob)

        plan.token_logprobs = [
            logprob(outputs[0], position, plan.tokens[position])
            for position in range(plan.prompt_length, len(plan.tokens))
        ]
        plan.choice_logprobs = [
            logprob(output, len(plan.tokens), choice) for output, choice in zip(outputs[1:], plan.choices, strict=True)
        ]
        self.counters.prompt_tokens += len(plan.tokens)
        return scored_completion(plan, submitted)

    def close(self) -> None:
        self.queue.clear()


@register_backend("vllm")
def open_vllm(catalog: Catalog, spec: ModelSpec, parallel: int) -> VllmBackend:
    return VllmBackend(catalog.resolve_path(spec), spec)
