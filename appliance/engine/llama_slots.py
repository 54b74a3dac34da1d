"""The llama.cpp backend's KV slots: which cache a request keeps, forks or copies back from host memory,
and what is saved before a cache is lost.

A slot is one llama.cpp sequence with its own KV stream and a record of the tokens it holds. These rules
decide every reuse, so they decide what exact mode promises: only prefill-computed KV is reused, only as far
as its chunks were the new prompt's own planned chunks, and for a sliding-window model only where the window
layers still hold what the next token attends (`chunk_plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import llama_cpp as C

from appliance.engine.backend import BackendCounters
from appliance.engine.chunk_plan import common_prefix, reusable_prefix, window_reuse
from appliance.engine.host_cache import HostCache, SavedSequence
from appliance.engine.llama_native import TokenBatch, TokenSampler, copy_sequence, sequence_floor
from appliance.engine.scoring import ScoringPlan
from appliance.engine.types import GenerationRequest
from appliance.errors import ApplianceError

#: Shortest shared prefix (tokens) for which taking another conversation's slot pays off.
MIN_SHARED_PREFIX = 64


def affordable_slots(
    name: str, slots: int, kv_budget_mb: int | None, tokens: int, token_bytes: int, scratch: int
) -> int:
    """The slots `kv_budget_mb` allows for sequences of `tokens`, the scratch sequence of stream copies
    included: the other requests wait, and a conversation whose cache was evicted is prefilled again."""
    if kv_budget_mb is None:
        return slots
    affordable = (kv_budget_mb * 1024 * 1024) // (tokens * token_bytes) - scratch
    if affordable < 1:
        raise ApplianceError(f"model '{name}': kv_budget_mb={kv_budget_mb} cannot hold one sequence of {tokens} tokens")
    return min(slots, int(affordable))


@dataclass
class Job:
    ticket: int
    request: GenerationRequest
    prompt_tokens: list[int]
    stop: tuple[str, ...]
    submitted_at: float
    sampler: TokenSampler | None = None
    slot: Slot | None = None
    prefill_cursor: int = 0
    cached_tokens: int = 0
    pending_token: int | None = None
    generated: list[int] = field(default_factory=list)
    text_bytes: bytearray = field(default_factory=bytearray)
    #: a scoring request: prefilled, its logits read, never decoded
    scoring: ScoringPlan | None = None
    #: set at submission when the request cannot be served; it is answered at admission
    error: str | None = None
    #: exact mode: where the prompt's prefill chunks end (see chunk_plan)
    plan: list[int] = field(default_factory=list)


@dataclass
class Slot:
    seq_id: int
    cached: list[int] = field(default_factory=list)
    #: leading cached tokens computed in prefill chunks of two or more tokens, never in one-token
    #: decode steps (another kernel, other last bits)
    batch_computed: int = 0
    #: exact mode: where the prefill chunks of those tokens ended (contiguous from position 0)
    chunk_ends: list[int] = field(default_factory=list)
    key: str | None = None
    last_used: float = 0.0
    job: Job | None = None

    def holds(self, tokens: list[int], batch_computed: int = 0, chunk_ends: list[int] | None = None) -> None:
        """Record what the sequence's KV now holds (copies of the lists: another slot or entry keeps its own)."""
        self.cached, self.batch_computed, self.chunk_ends = list(tokens), batch_computed, list(chunk_ends or [])


class SlotCaches:
    """The slots of one llama.cpp context and the host-memory tier behind them."""

    def __init__(
        self,
        context: C.llama_context_p,
        *,
        name: str,
        slots: int,
        window: int,
        kv_unified: bool,
        exact_kv: bool,
        reuse_cache: bool,
        host_cache: HostCache | None,
        counters: BackendCounters,
    ) -> None:
        self.context = context
        self.memory = C.llama_get_memory(context)
        self.name = name
        self.slots = [Slot(seq_id=index) for index in range(slots)]
        #: the model's sliding window (0: none); its caches are copied stream to stream (`copy`)
        self.window = window
        self.kv_unified = kv_unified
        self.stream_copies = window > 0 and not kv_unified
        self.exact_kv = exact_kv
        self.reuse_cache = reuse_cache
        self.host_cache = host_cache
        self.counters = counters
        #: a stream copy is queued until the next decode; state reads and writes wait for it
        self.copies_queued = False
        self.scratch_batch = TokenBatch(1)

    @staticmethod
    def reuse_limit(job: Job) -> int:
        """How many leading prompt tokens a cache may serve.

        A generation decodes at least its last prompt token, for its logits. A scoring request
        computes every position it reads, and at least two tokens: a lone token goes through
        another kernel (matrix-vector), and its logits would differ in the last bits.
        """
        if job.scoring is None:
            return len(job.prompt_tokens) - 1
        return max(0, min(job.scoring.first_read, len(job.prompt_tokens) - 2))

    def prefix_in_progress(self, job: Job) -> bool:
        """Whether a running prefill is computing a long prefix of this prompt right now."""
        for slot in self.slots:
            running = slot.job
            if running is None or running.prefill_cursor >= len(running.prompt_tokens):
                continue
            shared = common_prefix(running.prompt_tokens, job.prompt_tokens)
            if shared >= MIN_SHARED_PREFIX and running.prefill_cursor < shared:
                return True
        return False

    def reuse_prefix(self, slot: Slot, job: Job, source: Slot, shared: int) -> int:
        """Prepare `slot` for `job`; returns how many prompt tokens are already in its cache.

        The slot keeps what it shares with the prompt. If `source` (the slot with the
        longest reusable prefix) shares clearly more, its cache is copied over and cut
        to the shared part; if a cache saved in host memory shares clearly more still, it
        is copied back instead. What the slot held is saved first when nothing else holds it.
        """
        limit = self.reuse_limit(job)
        keep = self.reusable(slot, job, limit)
        forkable = shared if source is not slot else keep
        saved, restorable = (
            self.host_cache.best(job.prompt_tokens, job.plan, limit, exact=self.exact_kv)
            if self.host_cache is not None
            else (None, 0)
        )
        if saved is not None and restorable - max(keep, forkable) >= MIN_SHARED_PREFIX:
            keep = self.restore(slot, saved, restorable)
        elif source is not slot and shared - keep >= MIN_SHARED_PREFIX:
            self.spill(slot, kept=0)
            self.copy(source, slot)
            keep = shared
            self.counters.forked_tokens += shared
        self.spill(slot, kept=keep)
        cut = C.llama_memory_seq_rm(self.memory, slot.seq_id, keep, -1)
        if not cut or window_reuse(self.floor(slot), keep, self.window) < keep:
            # A sliding-window cache cannot always be cut in the middle, nor serve a prefix whose
            # window positions it lost (the choice above avoids those; this holds if it missed): start over.
            C.llama_memory_seq_rm(self.memory, slot.seq_id, -1, -1)
            keep = 0
        del slot.cached[keep:]
        slot.batch_computed = min(slot.batch_computed, keep)
        slot.chunk_ends = [end for end in slot.chunk_ends if end <= keep]
        return keep

    def restore(self, slot: Slot, saved: SavedSequence, serves: int) -> int:
        """Copy a saved cache into `slot` (its own cache saved first if nothing else holds it); returns
        how many prompt tokens it serves (0 if llama.cpp refused the copy: the slot is then empty)."""
        assert self.host_cache is not None
        self.spill(slot, kept=0, keep=saved)
        C.llama_memory_seq_rm(self.memory, slot.seq_id, -1, -1)
        self.flush_copies()
        if not self.host_cache.restore(saved, slot.seq_id):
            C.llama_memory_seq_rm(self.memory, slot.seq_id, -1, -1)
            slot.holds([])
            return 0
        slot.holds(saved.tokens, saved.batch_computed, saved.chunk_ends)
        self.counters.restored_tokens += serves
        return serves

    def spill(self, slot: Slot, *, kept: int, keep: SavedSequence | None = None) -> None:
        """Save `slot`'s cache to host memory before it is cut to `kept` tokens or overwritten (kept=0),
        when at least MIN_SHARED_PREFIX reusable tokens would be lost that no other slot or saved entry
        holds (the judges' follow-ups of one transcript differ only in their last few tokens). Tokens
        lost for good (no host cache, or a cache bigger than its budget) count as evicted. `keep`: the
        entry about to be restored into this slot, which the save must not drop."""
        reach = self.reach(slot)
        if not self.reuse_cache or reach - kept < MIN_SHARED_PREFIX:
            return
        mine = slot.cached[:reach]
        saved = self.host_cache.covered(mine, exact=self.exact_kv) if self.host_cache is not None else 0
        held = max(
            [kept, saved]
            + [
                window_reuse(self.floor(other), min(common_prefix(other.cached, mine), self.reach(other)), self.window)
                for other in self.slots
                if other is not slot
            ]
        )
        if reach - held < MIN_SHARED_PREFIX:
            return
        if self.host_cache is None:
            self.counters.evicted_tokens += reach - held
            return
        self.flush_copies()
        dropped = self.host_cache.dropped_tokens
        if self.host_cache.save(slot.seq_id, slot.cached, slot.batch_computed, slot.chunk_ends, keep=keep):
            self.counters.saved_caches += 1
            self.counters.host_cache_peak_bytes = self.host_cache.peak_bytes
            self.counters.evicted_tokens += self.host_cache.dropped_tokens - dropped
        else:
            self.counters.evicted_tokens += reach - held

    def reach(self, slot: Slot) -> int:
        """How many leading tokens of the slot's cache a later prompt could reuse."""
        return slot.batch_computed if self.exact_kv else len(slot.cached)

    def reusable(self, slot: Slot, job: Job, limit: int) -> int:
        """Cached tokens of `slot` that `job` may keep.

        Tokens generated one at a time were computed by a different ggml kernel
        (matrix-vector) than prompt tokens (matrix-matrix), so their KV differs
        in the last bits, and some kernels' results change with chunk boundaries.
        In exact mode only prefill-computed KV is reused, and only as far as it
        was cut into the new prompt's own planned chunks, which makes every
        result independent of batching and cache state.
        """
        if not self.reuse_cache:
            return 0
        shared = min(common_prefix(slot.cached, job.prompt_tokens), limit)
        return reusable_prefix(
            shared,
            slot.batch_computed,
            slot.chunk_ends,
            job.plan,
            exact=self.exact_kv,
            floor=self.floor(slot),
            window=self.window,
        )

    def floor(self, slot: Slot) -> int:
        """The lowest position the slot's sliding-window layers hold (0 without a window)."""
        return sequence_floor(self.memory, slot.seq_id) if self.window else 0

    def choose_slot(self, idle: list[Slot], job: Job, source: Slot, *, kept: int) -> Slot:
        """The lowest idle slot, so that decoding sequences have consecutive ids.

        If the request would keep little of that slot's cache (another conversation's, or a
        transcript other judges may still fork), the cache is first moved to the least recently
        used spare slot, when that one holds nothing or something older; the prefix the request
        needs is then copied in by `_reuse_prefix`. Without this, two roles alternating on one
        model would overwrite each other's cache at every turn. The slot the request forks from
        (`source`) is never the one overwritten. `kept`: how much of the lowest idle slot's cache
        the request can use.
        """
        target = idle[0]
        own = target.key is not None and target.key == job.request.conversation_key
        if own or len(target.cached) - kept < MIN_SHARED_PREFIX:
            return target
        spare = [slot for slot in idle[1:] if slot.key != job.request.conversation_key and slot is not source]
        if spare:
            victim = min(spare, key=lambda slot: (bool(slot.cached), slot.last_used))
            if not victim.cached or victim.last_used < target.last_used:
                self.move_cache(target, victim)
        return target

    def move_cache(self, source: Slot, destination: Slot) -> None:
        self.spill(destination, kept=0)
        self.copy(source, destination)
        destination.key, destination.last_used = source.key, source.last_used
        source.key = None
        self.counters.moved_caches += 1

    def copy(self, source: Slot, destination: Slot) -> None:
        """Make `destination`'s cache a copy of `source`'s, its token record included."""
        copy_sequence(
            self.context, source.seq_id, destination.seq_id, unified=self.kv_unified, whole_stream=self.stream_copies
        )
        self.copies_queued = self.copies_queued or self.stream_copies
        destination.holds(source.cached, source.batch_computed, source.chunk_ends)

    def flush_copies(self) -> None:
        """Carry out queued stream copies before a sequence's state is read or written: llama.cpp does
        them at the start of a decode, so one token is decoded into the scratch sequence and removed."""
        if not self.copies_queued:
            return
        scratch = len(self.slots)
        self.scratch_batch.clear()
        self.scratch_batch.add(0, 0, scratch, False)  # any token: nothing reads its KV
        status = C.llama_decode(self.context, self.scratch_batch.raw)
        self.scratch_batch.clear()
        C.llama_memory_seq_rm(self.memory, scratch, -1, -1)
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status} on model '{self.name}' (copying caches)")
        self.copies_queued = False

    def close(self) -> None:
        self.scratch_batch.close()
