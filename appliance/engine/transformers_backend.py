"""The transformers backend: torch + transformers on CPU or GPU, continuously batched.

Loads a Hugging Face folder, or a GGUF file through the float32 folder made once
from it (`hf_loading.hf_folder_from_gguf`). Requests join and leave the batch between decode
steps, and a conversation's cache is kept between its turns
(`transformers_batching.py`). A request's GBNF grammar is enforced through
xgrammar where it is installed (it comes with vLLM); without it, or on a
synthetic model (no tokenizer), a request with a grammar is refused at submit,
never decoded unconstrained. What it does not do, and the llama.cpp backend
does: fork one prompt's prefill for another's shared prefix.

One backend serves a base and any number of PEFT LoRA adapters of it: each request names its adapter
(`GenerationRequest.adapter`) and a batch mixes them, PEFT applying each row's own adapter in the same
forward pass; the base's weights are loaded once.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from appliance.catalog.backends import TransformersOptions
from appliance.catalog.models import Catalog, ModelSpec
from appliance.catalog.synthetic_shapes import SyntheticShape
from appliance.engine.backend import BackendBase, with_adapter
from appliance.engine.chat_format import render_with_tokenizer
from appliance.engine.chunk_plan import common_prefix
from appliance.engine.factory import hosted_adapters
from appliance.engine.hf_loading import (
    PEFT_BASE,
    import_torch_stack,
    load_pretrained,
    model_placement,
    peft_adapter_folder,
    weights_device,
    with_peft_adapters,
)
from appliance.engine.scoring import ScoringError, plan_for_request, refused_scoring, scored_completion
from appliance.engine.synthetic import ByteTokens, build_synthetic_model
from appliance.engine.transformers_batching import (
    ConversationCaches,
    DecodeBatch,
    GrammarCompiler,
    LiveSequence,
    StoredConversation,
    choose_token,
    import_xgrammar,
    logits_processors,
)
from appliance.engine.types import Completion, GenerationRequest


class TransformersBackend(BackendBase):
    def __init__(
        self,
        path: Path | None,
        *,
        name: str,
        synthetic: SyntheticShape | None = None,
        chat_format: str = "gguf",
        slots: int = 16,
        context_length: int = 4096,
        device: str | None = None,
        dtype: str | None = None,
        attn_implementation: str | None = None,
        threads: int | None = None,
        reuse_cache: bool = True,
        adapters: Mapping[str, tuple[Path, float]] | None = None,
        default_adapter: str | None = None,
    ) -> None:
        """`adapters`: PEFT LoRA folders and scales by entry name; `default_adapter`: the one a request
        naming none plays (None: the base)."""
        torch, transformers = import_torch_stack()
        self.torch = torch
        self.transformers = transformers
        super().__init__(name)
        if threads:
            torch.set_num_threads(threads)
        placement = model_placement(torch, device, dtype, attn_implementation)
        self.device = weights_device(torch, name, device)
        if synthetic is not None:
            dtype_of_weights = torch.float32 if placement["dtype"] == "auto" else placement["dtype"]
            self.tokenizer: Any = ByteTokens()
            self.model = build_synthetic_model(transformers, torch, synthetic, dtype_of_weights, self.device)
        else:
            assert path is not None
            self.tokenizer, self.model = load_pretrained(transformers, name, path, placement)
            if adapters:
                self.model = with_peft_adapters(self.model, adapters)
        self.adapters = frozenset(adapters or ())
        self.default_adapter = default_adapter
        if device == "auto" and synthetic is None:  # accelerate placed the layers (over every GPU, then CPU)
            self.device = str(self.model.device)
        else:
            self.model.to(self.device)
        self.model.eval()
        self.synthetic = synthetic is not None
        #: the grammar compiler, made at the first request with a grammar (None until then)
        self.grammars: GrammarCompiler | None = None
        self.use_template = chat_format == "gguf" and bool(getattr(self.tokenizer, "chat_template", None))
        self.slots = slots
        self.context_length = context_length
        #: requests refused on submit (a prompt that does not fit), answered by the next step
        self.refused: list[tuple[int, Completion]] = []
        self.waiting: deque[LiveSequence] = deque()
        self.live: list[LiveSequence] = []
        #: scoring requests waiting for the next step: (ticket, request, submitted at)
        self.scoring: list[tuple[int, GenerationRequest, float]] = []
        #: the decoding sequences' joined caches, kept between steps while they stay the same
        self.batch: DecodeBatch | None = None
        # without reuse (the bench's stateless baseline) no finished turn's cache is kept
        self.conversations = ConversationCaches(capacity=4 * slots if reuse_cache else 0)

    def _grammar_unsupported(self) -> str | None:
        if self.synthetic:
            return "a synthetic model has no tokenizer to follow a grammar with"
        if import_xgrammar() is None:
            return (
                "it enforces grammars through xgrammar, which is not installed (pip install xgrammar; vLLM brings it)"
            )
        return None

    def _queue(self, ticket: int, request: GenerationRequest) -> None:
        request = with_adapter(request, self.name, self.adapters, self.default_adapter)
        adapter = request.adapter
        if request.scoring is not None:
            self.scoring.append((ticket, request, time.perf_counter()))
            return
        text, stops = render_with_tokenizer(self.tokenizer, self.use_template, request)
        grammar = self._grammar_compiler().follow(request.grammar) if request.grammar is not None else None
        prompt = self.tokenizer.encode(text, add_special_tokens=not self.use_template)
        refusal = self._refusal(request, len(prompt), self.context_length)
        if refusal is not None:
            self.refused.append((ticket, refusal))
            return
        # a conversation's cache holds one adapter's keys and values: each adapter keeps its own
        conversation = request.conversation_key
        if conversation is not None and adapter is not None:
            conversation = f"{adapter}\x00{conversation}"
        sequence = LiveSequence(
            ticket=ticket,
            prompt=list(prompt),
            sampling=request.sampling,
            stops=self._stop_strings(ticket, request, stops),
            conversation=conversation,
            submitted_at=time.perf_counter(),
            adapter=adapter,
            grammar=grammar,
        )
        self.waiting.append(sequence)

    def _grammar_compiler(self) -> GrammarCompiler:
        """The model's grammar compiler, made once (`submit` refused the grammar where it cannot be)."""
        if self.grammars is None:
            vocab_size = int(self.model.config.get_text_config().vocab_size)
            self.grammars = GrammarCompiler(import_xgrammar(), self.tokenizer, vocab_size)
        return self.grammars

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.live or self.scoring or self.refused)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def _step(self) -> list[tuple[int, Completion]]:
        """Admit waiting requests into free slots (each prefilled alone), then one batched decode step.

        Scoring requests are prefilled alone, each in one forward pass, and finish in the step they join.
        """
        scored = [(ticket, self._score(request, submitted)) for ticket, request, submitted in self.scoring]
        scored += self.refused
        self.scoring.clear()
        self.refused = []
        with self.torch.inference_mode():
            while self.waiting and len(self.live) < self.slots:
                self._admit(self.waiting.popleft())
            decoding = [s for s in self.live if s.finish_reason is None]
            if decoding:
                self._decode(decoding)
        self.counters.peak_kv_cells = max(self.counters.peak_kv_cells, sum(s.cached_length for s in self.live))
        finished = [s for s in self.live if s.finish_reason is not None]
        if self.batch is not None:
            self.batch.release(finished)
        self.live = [s for s in self.live if s.finish_reason is None]
        return scored + [(s.ticket, self._complete(s)) for s in finished]

    def _score(self, request: GenerationRequest, submitted: float) -> Completion:
        """A scoring request: prompt and continuation in one forward pass, its rows read as log-probabilities."""
        try:
            plan = plan_for_request(self.tokenizer, self.use_template, request)
        except ScoringError as error:
            return refused_scoring(self.name, error, submitted)
        with self.torch.inference_mode():
            tokens = self.torch.tensor([plan.tokens], device=self.device)
            logits = self.model(input_ids=tokens, use_cache=False, **self._adapter_rows([request.adapter])).logits[0]
            for position in range(plan.first_read, len(plan.tokens)):
                if plan.wants(position):
                    plan.read(position, logits[position].float().cpu().numpy())
        return scored_completion(plan, submitted)

    def _admit(self, sequence: LiveSequence) -> None:
        """Reuse the conversation's stored cache up to the common prefix, prefill the rest, pick a first token."""
        stored = self.conversations.take(sequence.conversation)
        reuse = 0 if stored is None else min(common_prefix(stored.tokens, sequence.prompt), len(sequence.prompt) - 1)
        if stored is not None and reuse > 0:
            surplus = stored.cache.get_seq_length() - reuse
            if surplus > 0:
                stored.cache.crop(-surplus)  # transformers 5 crops by a negative count of tokens to drop
            sequence.cache = stored.cache
        else:
            reuse, sequence.cache = 0, self.transformers.DynamicCache()
        sequence.cached_tokens = reuse
        sequence.generator = self.torch.Generator(device=self.device).manual_seed(sequence.sampling.seed)
        sequence.processors = logits_processors(sequence.sampling)
        remainder = self.torch.tensor([sequence.prompt[reuse:]], device=self.device)
        positions = self.torch.arange(reuse, len(sequence.prompt), device=self.device).unsqueeze(0)
        output = self.model(
            input_ids=remainder,
            position_ids=positions,
            past_key_values=sequence.cache,
            use_cache=True,
            **self._adapter_rows([sequence.adapter]),
        )
        self.live.append(sequence)
        self._accept(sequence, choose_token(self.torch, sequence, output.logits[0, -1]))

    def _decode(self, sequences: list[LiveSequence]) -> None:
        """One token for every decoding sequence in one forward pass over their joined caches."""
        if self.batch is None or not self.batch.holds(sequences):
            if self.batch is not None:
                self.batch.dissolve()
            self.batch = DecodeBatch(self.torch, self.transformers.DynamicCache, sequences)
        tokens = self.torch.tensor([[s.pending] for s in sequences], device=self.device)
        positions = self.torch.tensor([[s.cached_length] for s in sequences], device=self.device)
        output = self.model(
            input_ids=tokens,
            attention_mask=self.batch.grow(),
            position_ids=positions,
            past_key_values=self.batch.cache,
            use_cache=True,
            **self._adapter_rows([s.adapter for s in sequences]),
        )
        self.counters.decode_calls += 1
        last = output.logits[:, -1]
        # plain greedy rows in one argmax and one copy to the host (not a device sync per row)
        greedy = [row for row, s in enumerate(sequences) if not s.processors and s.grammar is None]
        picks = dict(zip(greedy, last[greedy].argmax(dim=-1).tolist(), strict=True)) if greedy else {}
        for row, sequence in enumerate(sequences):
            sequence.pending = None
            token = picks[row] if row in picks else choose_token(self.torch, sequence, last[row])
            self._accept(sequence, token)

    def _adapter_rows(self, adapters: Sequence[str | None]) -> dict[str, Any]:
        """PEFT's per-row adapter names for a forward pass (nothing when no adapter is loaded)."""
        if not self.adapters:
            return {}
        return {"adapter_names": [adapter or PEFT_BASE for adapter in adapters]}

    def _accept(self, sequence: LiveSequence, token: int) -> None:
        """A sampled token: the end of the reply, or one more generated token (fed on the next step). A
        grammar that took its stop token ends the reply (nothing may follow, whatever `ignore_eos` says)."""
        complete = sequence.grammar is not None and sequence.grammar.accept(token)
        if complete or (token == self.tokenizer.eos_token_id and not sequence.sampling.ignore_eos):
            sequence.finish_reason = "stop"
            return
        sequence.generated.append(token)
        sequence.pending = token
        if sequence.stops and any(stop in self._text(sequence) for stop in sequence.stops):
            sequence.finish_reason = "stop"
        elif len(sequence.generated) >= sequence.sampling.max_tokens:
            sequence.finish_reason = "length"
        elif len(sequence.prompt) + len(sequence.generated) >= self.context_length:
            sequence.finish_reason = "length"  # the context is full

    def _text(self, sequence: LiveSequence) -> str:
        return str(self.tokenizer.decode(sequence.generated, skip_special_tokens=True))

    def _complete(self, sequence: LiveSequence) -> Completion:
        fed = sequence.prompt + sequence.generated[: sequence.cached_length - len(sequence.prompt)]
        self.conversations.keep(sequence.conversation, StoredConversation(fed, sequence.cache))
        return Completion(
            text=self._text(sequence),  # `step` cuts it at its stop strings
            finish_reason="stop" if sequence.finish_reason == "stop" else "length",
            prompt_tokens=len(sequence.prompt),
            cached_prompt_tokens=sequence.cached_tokens,
            completion_tokens=len(sequence.generated),
            token_ids=tuple(sequence.generated),
            latency_s=time.perf_counter() - sequence.submitted_at,
        )

    def _close(self) -> None:
        self.waiting.clear()
        self.scoring.clear()
        self.refused.clear()
        self.live.clear()
        self.batch = None
        self.conversations = ConversationCaches(capacity=self.conversations.capacity)


def transformers_backend_for(
    catalog: Catalog,
    spec: ModelSpec,
    *,
    slots: int,
    reuse_cache: bool = True,
    adapters: Sequence[ModelSpec] = (),
) -> TransformersBackend:
    """The backend for a models.toml entry, serving `adapters` (entries of LoRAs of it) as well; an
    adapter entry alone is its base serving that adapter by default. `reuse_cache=False` keeps no
    turn's cache (a stateless baseline)."""
    shape = spec.synthetic_shape
    options = spec.options_as(TransformersOptions)
    served, default = hosted_adapters(catalog, spec, adapters)
    # each adapter checked before the base is loaded
    folders = {name: (peft_adapter_folder(name, adapter), scale) for name, (adapter, scale) in served.items()}
    return TransformersBackend(
        None if shape is not None else catalog.resolve_path(spec),
        name=spec.name,
        synthetic=shape,
        chat_format=spec.chat_format,
        slots=slots,
        context_length=spec.context_length,
        device=options.device,
        dtype=options.dtype,
        attn_implementation=options.attn_implementation,
        threads=options.threads,
        reuse_cache=reuse_cache,
        adapters=folders,
        default_adapter=default,
    )


def open_transformers(
    catalog: Catalog, spec: ModelSpec, parallel: int, adapters: Sequence[ModelSpec] = ()
) -> TransformersBackend:
    return transformers_backend_for(catalog, spec, slots=max(1, min(spec.slots, parallel * 4)), adapters=adapters)
