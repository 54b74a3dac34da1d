"""A second tier of KV cache in host memory: sequences saved before their slot is overwritten.

A context has a fixed number of slots (KV streams). When more conversations and judge prefixes are
alive than slots, the least recently used cache is overwritten, and its conversation's next turn or
its transcript's next judge computes every token again. Before a slot's cache is overwritten, what
no other slot or saved entry holds is copied out (`llama_state_seq_get_data`), and a request that
shares more with a saved entry than with any slot gets it copied back into its slot. The copy holds
the very numbers the prefill computed, so a restored prefix gives bit-identical results (tested),
and a copy costs milliseconds where recomputing costs seconds. A sliding-window model's copy leaves
out the positions its window already masks: such an entry serves its whole length, not a prefix cut
much earlier (`chunk_plan.window_reuse`). Entries leave least recently used
first when the byte budget is full, and an entry whose reusable prefix another entry extends is
dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import llama_cpp as C

from appliance.engine.chunk_plan import common_prefix, reusable_prefix, window_reuse
from appliance.engine.host_memory import usable_memory_mb
from appliance.engine.llama_native import read_sequence_state, sequence_floor

#: Host memory (MB) a model's saved caches may take when models.toml does not set `host_cache_mb`. At
#: 512 MB, PingPong at 64 conversations on 32 slots prefilled 1.65x its distinct tokens and cost 1.19x
#: per conversation what 16 did; at 4,096 MB, 1.29x and 0.98x
#: (bench_results/notes/engine-end-to-end.md, "Cost as the work grows").
DEFAULT_BUDGET_MB = 4096


def default_budget_mb(memory_mb: int | None = None) -> int:
    """DEFAULT_BUDGET_MB, or a quarter of the machine's (or container's) memory where that is less: the
    memory is taken only as caches are saved, but a small machine running many conversations should
    not fill up."""
    memory_mb = usable_memory_mb() if memory_mb is None else memory_mb
    return DEFAULT_BUDGET_MB if memory_mb is None else min(DEFAULT_BUDGET_MB, memory_mb // 4)


@dataclass
class SavedSequence:
    """One slot's cache as it was when saved: its tokens, how far they were prefill-computed (exact
    mode reuses only that far) and where those prefill chunks ended, and the KV bytes."""

    tokens: list[int]
    batch_computed: int
    chunk_ends: list[int]
    data: Any  # a ctypes byte array of `size` bytes
    size: int
    #: the lowest position its sliding-window layers hold (see `chunk_plan.window_reuse`)
    floor: int = 0
    last_used: int = 0


class HostCache:
    """Saved sequence caches of one llama.cpp context, within `budget_bytes`."""

    def __init__(self, context: Any, budget_bytes: int, window: int = 0) -> None:
        self.context = context
        self.budget_bytes = budget_bytes
        #: the model's sliding window (0: none)
        self.window = window
        self.entries: list[SavedSequence] = []
        self.bytes = 0
        self.peak_bytes = 0
        #: prefill-computed tokens of the entries dropped for the budget
        self.dropped_tokens = 0
        self._clock = 0

    def reusable(self, entry: SavedSequence, tokens: list[int], plan: list[int], limit: int, *, exact: bool) -> int:
        """Leading tokens of a prompt that `entry` may serve (the same rule as a slot's cache)."""
        shared = min(common_prefix(entry.tokens, tokens), limit)
        return reusable_prefix(
            shared, entry.batch_computed, entry.chunk_ends, plan, exact=exact, floor=entry.floor, window=self.window
        )

    def best(self, tokens: list[int], plan: list[int], limit: int, *, exact: bool) -> tuple[SavedSequence | None, int]:
        """The entry that serves the most leading tokens of a prompt, and how many."""
        found, most = None, 0
        for entry in self.entries:
            served = self.reusable(entry, tokens, plan, limit, exact=exact)
            if served > most:
                found, most = entry, served
        return found, most

    def covered(self, tokens: list[int], *, exact: bool) -> int:
        """How much of `tokens` some entry already holds in reusable form."""
        most = 0
        for entry in self.entries:
            shared = common_prefix(entry.tokens, tokens)
            held = min(shared, entry.batch_computed) if exact else shared
            most = max(most, window_reuse(entry.floor, held, self.window))
        return most

    def save(
        self,
        seq_id: int,
        tokens: list[int],
        batch_computed: int,
        chunk_ends: list[int],
        *,
        keep: SavedSequence | None = None,
    ) -> bool:
        """Copy sequence `seq_id`'s KV out; False when it does not fit the budget at all. `keep`: an entry
        about to be restored, never the one dropped for the budget (the new entry goes instead)."""
        if int(C.llama_state_seq_get_size(self.context, seq_id)) > self.budget_bytes:
            return False
        memory = C.llama_get_memory(self.context)
        end = int(C.llama_memory_seq_pos_max(memory, seq_id)) + 1
        floor = max(sequence_floor(memory, seq_id), end - self.window) if self.window else 0
        data, written = read_sequence_state(self.context, seq_id)
        if written == 0:
            return False
        entry = SavedSequence(list(tokens), batch_computed, list(chunk_ends), data, written, floor)
        self._drop(lambda old: self._extends(entry, old))
        self.entries.append(entry)
        self.bytes += written
        self.touch(entry)
        while self.bytes > self.budget_bytes:
            doomed = min((old for old in self.entries if old is not keep), key=lambda old: old.last_used)
            self._drop_entries([doomed])
            self.dropped_tokens += doomed.batch_computed
        self.peak_bytes = max(self.peak_bytes, self.bytes)
        return True

    def restore(self, entry: SavedSequence, seq_id: int) -> bool:
        """Copy `entry` into sequence `seq_id`, which must be empty; False if llama.cpp refuses it."""
        self.touch(entry)
        return int(C.llama_state_seq_set_data(self.context, entry.data, entry.size, seq_id)) == entry.size

    def touch(self, entry: SavedSequence) -> None:
        self._clock += 1
        entry.last_used = self._clock

    @staticmethod
    def _extends(new: SavedSequence, old: SavedSequence) -> bool:
        """Whether `new` can serve everything `old` can: the same chunks, as far or further, and no
        fewer sliding-window positions."""
        reach = old.batch_computed
        return (
            new.batch_computed >= reach
            and new.floor <= old.floor
            and common_prefix(new.tokens, old.tokens) >= len(old.tokens)
            and new.chunk_ends[: len(old.chunk_ends)] == old.chunk_ends
        )

    def _drop(self, doomed: Callable[[SavedSequence], bool]) -> None:
        self._drop_entries([entry for entry in self.entries if doomed(entry)])

    def _drop_entries(self, entries: Iterable[SavedSequence]) -> None:
        for entry in list(entries):
            self.entries.remove(entry)
            self.bytes -= entry.size

    def clear(self) -> None:
        self._drop_entries(list(self.entries))
