"""Where exact mode cuts a prompt into prefill chunks, and how much of a cache a prompt may reuse.

Some kernels give results that depend on where a prompt's chunks begin and end (ggml's CPU flash
attention; Gemma 3's prefill on this CPU even without it, see bench_results/notes/engine-exactness.md). So in exact mode
every prompt is cut by a plan that is a function of the request alone: chunk ends at every
multiple of ALIGNED_CHUNK from position 0, plus boundaries the request declares (a scoring
request declares where its scored part starts, so that all requests scoring continuations of one
prompt share every chunk before it; a chat request, where each of its earlier messages leaves off,
so that its next turn and its siblings share every chunk before the part that differs). A cache
serves a new prompt only as far as its chunks are the new prompt's own planned chunks, and then
it is bit-identical to computing them again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

ALIGNED_CHUNK = 64


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens `a` and `b` share (compared in 64-token slices, then one by one)."""
    limit = min(len(a), len(b))
    index = 0
    while index + 64 <= limit and a[index : index + 64] == b[index : index + 64]:
        index += 64
    while index < limit and a[index] == b[index]:
        index += 1
    return index


def chunk_plan(length: int, declared: Iterable[int] = ()) -> list[int]:
    """The ends of a prompt's chunks: each multiple of ALIGNED_CHUNK below `length`, each declared
    boundary inside the prompt, and `length`; a one-token chunk is joined to the chunk before it, or
    after it when it comes first (a lone token goes through another matrix kernel than a chunk)."""
    ends = sorted({*range(ALIGNED_CHUNK, length, ALIGNED_CHUNK), *(d for d in declared if 0 < d < length), length})
    plan: list[int] = []
    start = 0
    for end in ends:
        if end - start == 1 and plan:
            plan[-1] = end
        elif end - start > 1 or end == length:
            plan.append(end)
        else:
            continue  # a lone first token: its chunk runs on to the next end
        start = end
    return plan


def reusable_prefix(
    shared: int,
    batch_computed: int,
    computed: list[int],
    plan: list[int],
    *,
    exact: bool,
    floor: int = 0,
    window: int = 0,
) -> int:
    """How many of the `shared` leading tokens of a cache a prompt planned as `plan` may reuse: all of
    them in fast mode; in exact mode only prefill-computed ones (`batch_computed`), cut where both plans
    cut (`reusable_boundary`); and none when the cache's sliding-window layers lack positions the next
    token attends (`window_reuse`)."""
    reuse = shared if not exact else reusable_boundary(computed, plan, min(shared, batch_computed))
    return window_reuse(floor, reuse, window)


def window_reuse(floor: int, reuse: int, window: int) -> int:
    """`reuse` if a cache whose sliding-window layers hold positions `floor` and after can serve its
    first `reuse` tokens to a prompt that goes on from there, else 0.

    The token at position `reuse` attends, in those layers, the `window` positions up to itself, so
    every position from `reuse - window + 1` must be held. A cache that llama.cpp serialised (a host
    cache entry, a copy through host memory) keeps only the last `window` positions before its own
    end, so it can serve its whole length but not a prefix cut much earlier. `window` 0: no sliding
    window, every prefix is served.
    """
    return reuse if window == 0 or floor <= max(0, reuse - window + 1) else 0


def reusable_boundary(computed: list[int], plan: list[int], shared: int) -> int:
    """How far a cache whose chunks ended at `computed` (contiguous from position 0) may serve a prompt
    planned as `plan` that shares `shared` tokens with it: the furthest chunk end up to which both
    cut the tokens the same way."""
    reusable = 0
    for mine, theirs in zip(computed, plan, strict=False):
        if mine != theirs or mine > shared:
            break
        reusable = mine
    return reusable
