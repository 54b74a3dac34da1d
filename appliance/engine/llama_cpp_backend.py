"""The llama.cpp backend: many sequences decoded together, KV kept between turns.

Each slot is one llama.cpp sequence (`seq_id`) with its own KV stream. A
slot remembers the tokens in its cache; a new request goes to the idle slot
whose cache shares the longest prefix with its prompt (its own conversation
when it returns), so only the new part of a conversation is prefilled. Every
step puts one token of every decoding sequence and chunks of prefilling
sequences into a single batch and calls `llama_decode` once.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp as C

from appliance.catalog.backends import LlamaCppOptions
from appliance.catalog.models import Catalog, ModelSpec
from appliance.engine.backend import BackendBase
from appliance.engine.chat_format import ChatFormatter, FormattedPrompt, GgufTemplateFormat, PlainTranscriptFormat
from appliance.engine.chunk_plan import chunk_plan, common_prefix
from appliance.engine.host_cache import HostCache, default_budget_mb
from appliance.engine.llama_native import (
    LlamaModel,
    TokenBatch,
    TokenSampler,
    apply_adapter,
    default_threads,
    gguf_adapter_file,
    new_context,
)
from appliance.engine.llama_slots import Job, Slot, SlotCaches, affordable_slots
from appliance.engine.scoring import ScoringError, ScoringPlan
from appliance.engine.types import Completion, FinishReason, GenerationRequest, Message, ScoredText, TokenScores
from appliance.errors import ApplianceError

#: Most scored positions per prefill chunk: their logits rows are copied out of one decode, and a
#: large vocabulary (Gemma's 262k) makes each row a megabyte.
MAX_SCORED_ROWS = 128
#: Extended texts kept in token form (`_extended_tokens`): one per reply being judged is enough.
EXTENDED_KEPT = 64


@dataclass
class _Chunk:
    """A prefill chunk staged in the batch: the row that starts its reply, or the rows it scores."""

    job: Job
    size: int
    owner: int | None = None
    #: (batch index, prompt position) of each scored position
    reads: list[tuple[int, int]] = field(default_factory=list)


class LlamaCppBackend(BackendBase):
    """Continuous batching over llama.cpp's low-level API."""

    def __init__(
        self,
        model_path: Path,
        *,
        name: str,
        chat_format: str = "gguf",
        context_length: int = 2048,
        slots: int = 8,
        batch_tokens: int = 512,
        threads: int | None = None,
        kv_unified: bool = False,
        flash_attention: bool = False,
        exact_kv: bool = True,
        reuse_cache: bool = True,
        lazy_grammar: bool = True,
        kv_budget_mb: int | None = None,
        gpu_layers: int | None = None,
        adapter: Path | None = None,
        adapter_scale: float = 1.0,
        host_cache_mb: int | None = None,
    ) -> None:
        super().__init__(name)
        self.exact_kv = exact_kv
        self.reuse_cache = reuse_cache
        #: sample first and apply a request's grammar only when the token breaks it (see TokenSampler)
        self.lazy_grammar = lazy_grammar
        adapter_file = gguf_adapter_file(adapter, name) if adapter is not None else None
        # one copy of the weights for a base and all its adapters; each adapter gets a context of its own
        self.model = LlamaModel.shared(model_path, name, gpu_layers)
        self.formatter: ChatFormatter = (
            GgufTemplateFormat(self.model.apply_chat_template) if chat_format == "gguf" else PlainTranscriptFormat()
        )
        self.kv_bytes_per_token = self.model.kv_bytes_per_token()
        window = self.model.sliding_window
        # Stream copies of a sliding-window model get one more sequence, a scratch one that
        # `SlotCaches.flush_copies` decodes into.
        scratch = int(window > 0 and not kv_unified)
        try:
            lora = self.model.adapter(adapter_file, name) if adapter_file is not None else None
            slots = affordable_slots(name, slots, kv_budget_mb, context_length, self.kv_bytes_per_token, scratch)
            self.context = new_context(
                self.model,
                name,
                sequences=slots + scratch,
                context_length=context_length,
                batch_tokens=batch_tokens,
                threads=threads or default_threads(),
                kv_unified=kv_unified,
                flash_attention=flash_attention,
            )
        except ApplianceError:
            self.model.close()
            raise
        if lora is not None:
            try:
                apply_adapter(self.context, lora, adapter_scale)
            except ApplianceError:
                C.llama_free(self.context)
                self.model.close()
                raise
        self.kv_unified = kv_unified
        self.memory = C.llama_get_memory(self.context)
        #: caches saved to host memory before their slot is overwritten (see host_cache.py)
        host_cache_mb = default_budget_mb() if host_cache_mb is None else host_cache_mb
        host_cache = HostCache(self.context, host_cache_mb * 2**20, window) if host_cache_mb and reuse_cache else None
        self.caches = SlotCaches(
            self.context,
            name=name,
            slots=slots,
            window=window,
            kv_unified=kv_unified,
            exact_kv=exact_kv,
            reuse_cache=reuse_cache,
            host_cache=host_cache,
            counters=self.counters,
        )
        self.slots = self.caches.slots
        self.host_cache = self.caches.host_cache
        self.context_length = int(C.llama_n_ctx_seq(self.context))
        self.batch_tokens = batch_tokens
        self.batch = TokenBatch(batch_tokens)
        self.waiting: deque[Job] = deque()
        self._extended: dict[ScoredText, tuple[int, list[int]]] = {}

    def count_tokens(self, text: str) -> int:
        return len(self.model.tokenize(text, parse_special=False))

    # -- submission -------------------------------------------------------

    def _queue(self, ticket: int, request: GenerationRequest) -> None:
        tokens, stop = self._prompt(request)
        job = Job(
            ticket=ticket,
            request=request,
            prompt_tokens=tokens,
            stop=self._stop_strings(ticket, request, stop),
            submitted_at=time.perf_counter(),
        )
        if request.scoring is not None:
            self._plan_scoring(job)
        if self.exact_kv:
            job.plan = chunk_plan(len(job.prompt_tokens), self._declared_cuts(job))
        self.waiting.append(job)

    def _prompt(self, request: GenerationRequest) -> tuple[list[int], tuple[str, ...]]:
        """The request's prompt tokens, and the stop strings its chat format adds."""
        formatted = (
            FormattedPrompt(text=request.prompt, parse_special=True)
            if request.prompt is not None
            else self.formatter.render(request.messages)
        )
        return self._tokenize(formatted), formatted.stop

    def _tokenize(self, formatted: FormattedPrompt) -> list[int]:
        return self.model.tokenize(formatted.text, parse_special=formatted.parse_special)

    def _head(self, messages: tuple[Message, ...]) -> list[int]:
        """The prompt of a request's leading messages; none (no cut) where the chat template refuses
        them alone, as a template that insists on alternating roles may: a cut must never fail a request."""
        try:
            return self._tokenize(self.formatter.render(messages))
        except ApplianceError:
            return []

    def _continuation(self, text: str) -> list[int]:
        """A scored continuation is tokenised on its own, as it continues the prompt."""
        return self.model.tokenize(text, parse_special=False, add_bos=False)

    def request_reads(self, request: GenerationRequest) -> tuple[list[int], range]:
        """Every token a request prefills (a scoring request's continuation included) and the positions whose
        logits it reads (a generation: its last; a scoring request: its prompt's last token on), for benchmarks."""
        tokens, _ = self._prompt(request)
        if request.scoring is None:
            return tokens, range(len(tokens) - 1, len(tokens))
        whole = tokens + self._continuation(request.scoring.continuation)
        return whole, range(len(tokens) - 1, len(whole) - (0 if request.scoring.choices else 1))

    def _plan_scoring(self, job: Job) -> None:
        """The continuation joins the prompt's tokens."""
        scoring = job.request.scoring
        assert scoring is not None
        continuation = self._continuation(scoring.continuation)
        choices = [self._continuation(choice) for choice in scoring.choices]
        try:
            job.scoring = ScoringPlan.build(job.prompt_tokens, continuation, choices, scoring)
        except ScoringError as error:
            job.error = f"model '{self.name}': {error}"
            return
        job.prompt_tokens = job.scoring.tokens

    def _declared_cuts(self, job: Job) -> list[int]:
        """Where a request's prefill chunks end besides the aligned ones.

        A chat request: where its tokens stop agreeing with the prompt of its first message, of its
        first two, ... (each as its own request would send it). So a conversation's next turn reuses
        its previous prompt whole (that prompt is a head of the next one), and requests that share
        their first messages fork right where they part, not at the last aligned end before it.
        A scoring request: where its scored part starts, and where the request it extends is cut (its
        scored part's start and its end), when its prompt does begin with that request's tokens."""
        if job.scoring is None:
            messages = job.request.messages if job.request.prompt is None else ()
            heads = (self._head(messages[:count]) for count in range(1, len(messages)))
            return [common_prefix(job.prompt_tokens, head) for head in heads]
        cuts = [job.scoring.first_read]
        assert job.request.scoring is not None
        extended = job.request.scoring.extends
        if extended is not None:
            prompt_length, whole = self._extended_tokens(extended)
            if len(whole) <= cuts[0] and job.prompt_tokens[: len(whole)] == whole:
                cuts += [prompt_length - 1, len(whole)]
        return cuts

    def _extended_tokens(self, extended: ScoredText) -> tuple[int, list[int]]:
        """An extended request's prompt length and whole text in tokens, tokenised once for all the requests
        that extend it (a reply's follow-ups); the most recent EXTENDED_KEPT texts are kept."""
        found = self._extended.pop(extended, None)
        if found is None:
            prompt = self.model.tokenize(extended.prompt, parse_special=True)
            found = len(prompt), prompt + self._continuation(extended.continuation)
        if len(self._extended) >= EXTENDED_KEPT:
            del self._extended[next(iter(self._extended))]
        self._extended[extended] = found
        return found

    @property
    def busy(self) -> bool:
        return bool(self.waiting) or any(slot.job is not None for slot in self.slots)

    # -- the decode loop --------------------------------------------------

    def _step(self) -> list[tuple[int, Completion]]:
        """One token for every decoding sequence, then prefill within the token budget.

        Exact mode: with one KV stream per sequence, llama.cpp splits a batch into
        micro-batches that hold an equal number of tokens from sequences with consecutive
        ids. So the decode tokens go in one call (slots are kept compact so their ids are
        consecutive), and each prefill chunk in a call of its own: mixed with decode
        tokens, a chunk's first token would be computed alone, by another kernel.
        Fast mode promises no such identity, so the decode tokens and a prefill chunk of
        every prefilling sequence share one call: on a GPU a call costs milliseconds
        whatever its size (docs/engine.md, "GPUs").
        """
        finished = self._admit_waiting()
        self.batch.clear()
        decoding: list[tuple[int, Job]] = []
        for slot in self.slots:
            job = slot.job
            if job is None or job.pending_token is None:
                continue
            index = self.batch.add(job.pending_token, len(slot.cached), slot.seq_id, True)
            slot.cached.append(job.pending_token)
            job.pending_token = None
            decoding.append((index, job))
        if not self.exact_kv:
            return finished + self._packed_step(decoding)
        if decoding:
            finished.extend(self._decode_and_sample(decoding, prefill=False))
        budget = self.batch_tokens
        for slot in self.slots:
            job = slot.job
            while job is not None and slot.job is job and job.prefill_cursor < len(job.prompt_tokens):
                size = self._chunk_size(job, budget)
                if size == 0:
                    break
                budget -= size
                self.batch.clear()
                finished.extend(self._run_batch([self._stage_chunk(slot, job, size)], prefill=True))
        return finished

    def _packed_step(self, decoding: list[tuple[int, Job]]) -> list[tuple[int, Completion]]:
        """Fast mode: the staged decode tokens and one prefill chunk per prefilling sequence, in one call
        of at most `batch_tokens` tokens and MAX_SCORED_ROWS scored rows."""
        budget, rows = self.batch_tokens - len(decoding), MAX_SCORED_ROWS
        chunks: list[_Chunk] = []
        for slot in self.slots:
            job = slot.job
            if job is None or job.prefill_cursor >= len(job.prompt_tokens) or (job.scoring is not None and rows < 2):
                continue
            size = self._chunk_size(job, budget, rows)
            if size == 0:
                continue
            chunk = self._stage_chunk(slot, job, size)
            budget -= chunk.size
            rows -= len(chunk.reads)
            chunks.append(chunk)
        if not decoding and not chunks:
            return []
        return self._run_batch(chunks, prefill=not decoding, decoding=decoding)

    def _chunk_size(self, job: Job, budget: int, rows: int = MAX_SCORED_ROWS) -> int:
        """The next prefill chunk of `job` within `budget` tokens and `rows` scored rows (0: none fits).

        Exact mode: the job's planned chunk (a function of the request alone). Fast mode: as much as
        the budget takes, never leaving a lone token before the last one.
        """
        cursor, length = job.prefill_cursor, len(job.prompt_tokens)
        if self.exact_kv:
            size = next(end for end in job.plan if end > cursor) - cursor
            return size if size <= budget else 0
        if budget < 2:
            return 0
        remaining = length - cursor
        size = min(remaining, budget, self._scored_rows_cap(job, rows))
        if size < remaining and remaining - size < 2:
            size = max(2, remaining - 2)
        return size

    def _scored_rows_cap(self, job: Job, rows: int) -> int:
        """The longest chunk from the job's cursor that reads at most `rows` logits rows."""
        if job.scoring is None:
            return len(job.prompt_tokens)
        return max(job.scoring.first_read - job.prefill_cursor, 0) + rows

    def _stored_end(self, slot: Slot) -> int:
        """How many positions the sequence's KV holds (its highest position + 1; 0 when empty)."""
        return int(C.llama_memory_seq_pos_max(self.memory, slot.seq_id)) + 1

    def _resync(self, slot: Slot, job: Job) -> None:
        """The slot's KV does not end where its token record says: forget both and prefill the
        prompt again from position 0 (llama.cpp would refuse the chunk as an invalid batch)."""
        C.llama_memory_seq_rm(self.memory, slot.seq_id, -1, -1)
        slot.holds([])
        job.prefill_cursor = 0
        job.cached_tokens = 0
        if job.scoring is not None:  # its rows are read again from the start
            job.scoring.token_logprobs.clear()
            job.scoring.choice_logprobs = []
        self.counters.kv_resyncs += 1

    def _stage_chunk(self, slot: Slot, job: Job, size: int) -> _Chunk:
        """Add the next `size` prompt tokens of `job` to the batch (after the tokens already there)."""
        if self._stored_end(slot) != len(slot.cached) or len(slot.cached) != job.prefill_cursor:
            self._resync(slot, job)
            size = min(size, len(job.prompt_tokens))
        start, end = job.prefill_cursor, job.prefill_cursor + size
        chunk = _Chunk(job=job, size=size)
        for position in range(start, end):
            last = position == len(job.prompt_tokens) - 1
            scored = job.scoring is not None and job.scoring.wants(position)
            index = self.batch.add(job.prompt_tokens[position], position, slot.seq_id, last or scored)
            if scored:
                chunk.reads.append((index, position))
            elif last and job.scoring is None:
                chunk.owner = index
        if slot.batch_computed == len(slot.cached) and size >= 2:
            slot.batch_computed = end
            if self.exact_kv:
                slot.chunk_ends.append(end)
        slot.cached.extend(job.prompt_tokens[start:end])
        job.prefill_cursor = end
        return chunk

    def _run_batch(
        self, chunks: list[_Chunk], *, prefill: bool, decoding: list[tuple[int, Job]] | None = None
    ) -> list[tuple[int, Completion]]:
        """Decode the staged batch; sample the rows that start a reply, read the scored ones."""
        owners = (decoding or []) + [(chunk.owner, chunk.job) for chunk in chunks if chunk.owner is not None]
        finished = self._decode_and_sample(owners, prefill=prefill)
        for chunk in chunks:
            scoring = chunk.job.scoring
            if scoring is None:
                continue
            for index, position in chunk.reads:
                scoring.read(position, self.model.logits_view(self.context, index))
            if chunk.job.prefill_cursor == len(chunk.job.prompt_tokens):
                finished.append(self._finish(chunk.job, "stop", scoring.result()))
        return finished

    def _decode_and_sample(self, owners: list[tuple[int, Job]], *, prefill: bool) -> list[tuple[int, Completion]]:
        started = time.perf_counter()
        status = C.llama_decode(self.context, self.batch.raw)
        self.caches.copies_queued = False
        elapsed = time.perf_counter() - started
        if prefill:
            self.counters.prefill_s += elapsed
        else:
            self.counters.decode_s += elapsed
        self.counters.decode_calls += 1
        self.counters.peak_kv_cells = max(self.counters.peak_kv_cells, sum(len(s.cached) for s in self.slots))
        if status != 0:
            mismatched = [
                f"seq {slot.seq_id}: KV ends at {self._stored_end(slot)}, record {len(slot.cached)}"
                for slot in self.slots
                if self._stored_end(slot) != len(slot.cached)
            ]
            detail = f" ({'; '.join(mismatched)})" if mismatched else ""
            raise RuntimeError(f"llama_decode failed with status {status} on model '{self.name}'{detail}")
        finished = []
        started = time.perf_counter()
        for index, job in owners:
            assert job.sampler is not None
            token = job.sampler.sample(self.context, index)
            outcome = self._accept_token(job, token)
            if outcome is not None:
                finished.append(self._finish(job, outcome))
        self.counters.sample_s += time.perf_counter() - started
        return finished

    def _accept_token(self, job: Job, token: int) -> FinishReason | None:
        """Record a sampled token; return a finish reason when the request is done."""
        if self.model.is_end_of_generation(token) and not job.request.sampling.ignore_eos:
            return "stop"
        job.generated.append(token)
        piece = self.model.piece(token)
        job.text_bytes.extend(piece)
        if job.stop:
            # Only the tail can hold a stop string that this token completed.
            window = max(len(stop.encode()) for stop in job.stop) + len(piece) + 3
            tail = job.text_bytes[-window:].decode("utf-8", errors="ignore")
            if any(stop in tail for stop in job.stop):
                return "stop"
        if len(job.generated) >= job.request.sampling.max_tokens:
            return "length"
        assert job.slot is not None
        if len(job.slot.cached) + 1 >= self.context_length:
            return "length"
        job.pending_token = token
        return None

    # -- slots ------------------------------------------------------------

    def _admit_waiting(self) -> list[tuple[int, Completion]]:
        """Give waiting requests an idle slot, reusing every cached token they share.

        A request whose prompt shares a long prefix with a request still being
        prefilled waits for it, then forks its cache instead of computing the
        same tokens again (judges rating one transcript, episodes sharing a
        system prompt).
        """
        rejected: list[tuple[int, Completion]] = []
        deferred: list[Job] = []
        while self.waiting:
            idle = [slot for slot in self.slots if slot.job is None]
            if not idle:
                break
            job = self.waiting.popleft()
            if job.error is not None:
                rejected.append(self._reject(job, "error", job.error))
                continue
            # the shared rule, to the token: a prompt of context - 1 tokens has room for one generated token,
            # and a prompt and its reserved reply may fill the context (the last token is never fed back)
            refusal = self._refusal(
                job.request, len(job.prompt_tokens), self.context_length, time.perf_counter() - job.submitted_at
            )
            if refusal is not None:
                rejected.append((job.ticket, refusal))
                continue
            if self.caches.prefix_in_progress(job):
                deferred.append(job)
                continue
            limit = self.caches.reuse_limit(job)
            cached = max(min(common_prefix(other.cached, job.prompt_tokens), limit) for other in self.slots)
            reusable = {other.seq_id: self.caches.reusable(other, job, limit) for other in self.slots}
            source = max(self.slots, key=lambda other: reusable[other.seq_id])
            # A move never lands on `source`, so what it can serve stays as measured here.
            slot = self.caches.choose_slot(idle, job, source, kept=reusable[idle[0].seq_id])
            keep = self.caches.reuse_prefix(slot, job, source, reusable[source.seq_id])
            self.counters.recomputed_cached_tokens += max(0, cached - keep) if self.reuse_cache else 0
            slot.job = job
            slot.key = job.request.conversation_key
            job.slot = slot
            job.prefill_cursor = keep
            job.cached_tokens = keep
            if job.scoring is None:
                job.sampler = TokenSampler(
                    self.model, job.request.sampling, job.request.grammar, lazy=self.lazy_grammar
                )
        self.waiting.extendleft(reversed(deferred))
        return rejected

    def _finish(self, job: Job, reason: FinishReason, scores: TokenScores | None = None) -> tuple[int, Completion]:
        text = job.text_bytes.decode("utf-8", errors="replace")  # `step` cuts it at its stop strings
        slot = job.slot
        assert slot is not None
        slot.job = None
        slot.last_used = time.perf_counter()
        if job.sampler is not None:
            self.counters.grammar_rejections += job.sampler.rejections
            job.sampler.free()
            job.sampler = None
        completion = Completion(
            text=text,
            finish_reason=reason,
            prompt_tokens=len(job.prompt_tokens),
            cached_prompt_tokens=job.cached_tokens,
            completion_tokens=len(job.generated),
            latency_s=time.perf_counter() - job.submitted_at,
            token_ids=tuple(job.generated),
            scores=scores,
        )
        return job.ticket, completion

    def _reject(self, job: Job, reason: FinishReason, error: str) -> tuple[int, Completion]:
        completion = Completion(
            text="",
            finish_reason=reason,
            prompt_tokens=len(job.prompt_tokens),
            completion_tokens=0,
            latency_s=time.perf_counter() - job.submitted_at,
            error=error,
        )
        return job.ticket, completion

    def forget_caches(self) -> None:
        """Drop every idle sequence's cache (benchmarks start each workload cold)."""
        for slot in self.slots:
            if slot.job is None:
                C.llama_memory_seq_rm(self.memory, slot.seq_id, -1, -1)
                slot.holds([])
                slot.key = None
        if self.host_cache is not None:
            self.host_cache.clear()

    def _close(self) -> None:
        for slot in self.slots:
            if slot.job is not None and slot.job.sampler is not None:
                slot.job.sampler.free()
            slot.job = None
        self.waiting.clear()
        self.batch.close()
        self.caches.close()
        if self.context:
            C.llama_free(self.context)
            self.context = None
        self.model.close()


def open_llama_cpp(catalog: Catalog, spec: ModelSpec, parallel: int) -> LlamaCppBackend:
    options = spec.options_as(LlamaCppOptions)
    return LlamaCppBackend(
        catalog.resolve_path(spec),
        name=spec.name,
        chat_format=spec.chat_format,
        context_length=spec.context_length,
        slots=max(1, min(spec.slots, parallel * 4)),
        threads=options.threads,
        exact_kv=options.exact_kv,
        kv_unified=options.kv_unified,
        flash_attention=options.flash_attention,
        kv_budget_mb=options.kv_budget_mb,
        host_cache_mb=options.host_cache_mb,
        gpu_layers=options.gpu_layers,
        adapter=catalog.resolve_adapter(spec),
        adapter_scale=spec.adapter_scale,
    )
