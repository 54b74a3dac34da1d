"""The transformers backend: torch + transformers, batched `generate` on CPU or GPU.

Loads a Hugging Face folder, or a GGUF file through `gguf_file=` (transformers
dequantises it to float32). Each step takes the queued requests that share
sampling settings, left-pads them into one batch and generates to the end
(static batching). What it does not do, and the llama.cpp backend does: keep
a conversation's cache between turns, fork shared prefixes, and enforce
grammars (a constrained role's reply is parsed as is; failures are stored as
unparsed). Sampled (temperature > 0) outputs depend on batch composition here,
because torch draws one random stream per `generate` call; greedy does not.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.catalog import Catalog, ModelSpec
from appliance.engine.backend import BackendCounters
from appliance.engine.chat_format import render_with_tokenizer
from appliance.engine.registry import register_backend
from appliance.engine.types import Completion, GenerationRequest, ResolvedSampling
from appliance.errors import ApplianceError


@dataclass
class _Queued:
    ticket: int
    request: GenerationRequest
    submitted_at: float


def _import_torch_stack() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError:
        raise ApplianceError(
            "the transformers backend needs torch and transformers: pip install -e '.[hf]' "
            "(torch==2.13.0 is the CPU build)"
        ) from None
    return torch, transformers


def model_placement(torch: Any, device: str | None, dtype: str | None, attention: str | None) -> dict[str, Any]:
    """`from_pretrained` arguments from models.toml's device, dtype and attn_implementation."""
    placement: dict[str, Any] = {"dtype": "auto" if dtype == "auto" else getattr(torch, dtype or "float32")}
    if device == "auto":
        placement["device_map"] = "auto"
    if attention is not None:
        placement["attn_implementation"] = attention
    return placement


class TransformersBackend:
    def __init__(
        self,
        path: Path,
        *,
        name: str,
        chat_format: str = "gguf",
        slots: int = 16,
        device: str | None = None,
        dtype: str | None = None,
        attn_implementation: str | None = None,
        threads: int | None = None,
    ) -> None:
        torch, transformers = _import_torch_stack()
        self.torch = torch
        self.name = name
        if not path.exists():
            raise ApplianceError(f"model '{name}': {path} not found")
        if threads:
            torch.set_num_threads(threads)
        source, extra = (str(path.parent), {"gguf_file": path.name}) if path.is_file() else (str(path), {})
        placement = model_placement(torch, device, dtype, attn_implementation)
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(source, local_files_only=True, **extra)
            self.model = transformers.AutoModelForCausalLM.from_pretrained(
                source, local_files_only=True, **placement, **extra
            )
        except (OSError, ValueError) as error:
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ApplianceError(f"model '{name}': transformers could not load {path}: {first}") from None
        if device == "auto":  # accelerate placed the layers (over every visible GPU, then CPU)
            self.device = str(self.model.device)
        else:
            self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            self.model.to(self.device)
        self.model.eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.use_template = chat_format == "gguf" and bool(getattr(self.tokenizer, "chat_template", None))
        self.slots = slots
        self.waiting: deque[_Queued] = deque()
        self.counters = BackendCounters()
        self._next_ticket = 0

    def submit(self, request: GenerationRequest) -> int:
        ticket = self._next_ticket
        self._next_ticket += 1
        self.waiting.append(_Queued(ticket, request, time.perf_counter()))
        self.counters.requests += 1
        return ticket

    @property
    def busy(self) -> bool:
        return bool(self.waiting)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def _prompt(self, request: GenerationRequest) -> tuple[str, tuple[str, ...]]:
        return render_with_tokenizer(self.tokenizer, self.use_template, request)

    def step(self) -> list[tuple[int, Completion]]:
        """Generate one batch: the oldest request and queued ones with the same sampling."""
        if not self.waiting:
            return []
        head = self.waiting[0].request.sampling
        batch = [queued for queued in self.waiting if _same_settings(queued.request.sampling, head)][: self.slots]
        for queued in batch:
            self.waiting.remove(queued)
        prompts = [self._prompt(queued.request) for queued in batch]
        encoded = self.tokenizer(
            [text for text, _ in prompts], return_tensors="pt", padding=True, add_special_tokens=not self.use_template
        ).to(self.device)
        settings: dict[str, Any] = {
            "max_new_tokens": head.max_tokens,
            "pad_token_id": self.tokenizer.pad_token_id,
            "repetition_penalty": head.repeat_penalty,
        }
        if head.temperature > 0:
            self.torch.manual_seed(head.seed)
            settings.update(do_sample=True, temperature=head.temperature, top_p=head.top_p, top_k=head.top_k or None)
            if head.min_p > 0:
                settings["min_p"] = head.min_p
        else:
            settings.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if head.ignore_eos:
            settings["min_new_tokens"] = head.max_tokens
        with self.torch.inference_mode():
            output = self.model.generate(**encoded, **settings)
        self.counters.decode_calls += 1
        width = encoded["input_ids"].shape[1]
        results: list[tuple[int, Completion]] = []
        eos = self.tokenizer.eos_token_id
        for row, (queued, (_, stops)) in enumerate(zip(batch, prompts, strict=True)):
            generated = output[row, width:].tolist()
            prompt_tokens = int(encoded["attention_mask"][row].sum())
            ended = eos in generated and not head.ignore_eos
            if ended:
                generated = generated[: generated.index(eos)]
            while generated and generated[-1] == self.tokenizer.pad_token_id and not ended:
                generated.pop()
            text = self.tokenizer.decode(generated, skip_special_tokens=True)
            cut = min((text.find(stop) for stop in stops if stop in text), default=-1)
            if cut >= 0:
                text, ended = text[:cut], True
            completion = Completion(
                text=text,
                finish_reason="stop" if ended else "length",
                prompt_tokens=prompt_tokens,
                completion_tokens=len(generated),
                latency_s=time.perf_counter() - queued.submitted_at,
            )
            self.counters.prompt_tokens += prompt_tokens
            self.counters.completion_tokens += len(generated)
            results.append((queued.ticket, completion))
        return results

    def close(self) -> None:
        self.waiting.clear()


def _same_settings(a: ResolvedSampling, b: ResolvedSampling) -> bool:
    return a.model_copy(update={"seed": 0, "stop": ()}) == b.model_copy(update={"seed": 0, "stop": ()})


@register_backend("transformers")
def open_transformers(catalog: Catalog, spec: ModelSpec, parallel: int) -> TransformersBackend:
    return TransformersBackend(
        catalog.resolve_path(spec),
        name=spec.name,
        chat_format=spec.chat_format,
        slots=max(1, min(spec.slots, parallel * 4)),
        device=spec.device,
        dtype=spec.dtype,
        attn_implementation=spec.attn_implementation,
        threads=spec.threads,
    )
