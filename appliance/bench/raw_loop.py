"""The ceiling: a bare ctypes loop of batched `llama_decode` with greedy selection by argmax.

No slots, no scheduler, no text: N sequences prefilled together, then one
token per sequence per `llama_decode` until each has T tokens. The engine is
measured against this on the same prompts and token counts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import llama_cpp as C

from appliance.engine.llama_native import LlamaModel, TokenBatch, default_threads, greedy_token, new_context


@dataclass(frozen=True)
class DecodeTiming:
    sequences: int
    generated_tokens: int
    prefill_tokens: int
    wall_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.wall_s if self.wall_s > 0 else 0.0


def raw_batched_decode(
    model: LlamaModel,
    prompts: list[list[int]],
    new_tokens: int,
    *,
    context_length: int,
    threads: int | None = None,
    kv_unified: bool = False,
    flash_attention: bool = False,
    batch_tokens: int = 512,
) -> DecodeTiming:
    """Prefill every prompt, then decode `new_tokens` greedy tokens for each (EOS ignored)."""
    count = len(prompts)
    context = new_context(
        model,
        model.name,
        sequences=count,
        context_length=context_length,
        batch_tokens=batch_tokens,
        threads=threads or default_threads(),
        kv_unified=kv_unified,
        flash_attention=flash_attention,
    )
    batch = TokenBatch(max(batch_tokens, count))
    try:
        started = time.perf_counter()
        next_token = [0] * count
        pending = [
            (seq, position, token) for seq, prompt in enumerate(prompts) for position, token in enumerate(prompt)
        ]
        while pending:
            batch.clear()
            chunk, pending = pending[:batch_tokens], pending[batch_tokens:]
            finishing: list[tuple[int, int]] = []
            for seq, position, token in chunk:
                is_last = position == len(prompts[seq]) - 1
                index = batch.add(token, position, seq, is_last)
                if is_last:
                    finishing.append((seq, index))
            if C.llama_decode(context, batch.raw) != 0:
                raise RuntimeError("llama_decode failed during prefill")
            for seq, index in finishing:  # logits live only until the next decode
                next_token[seq] = greedy_token(context, index, model.n_vocab)
        positions = [len(prompt) for prompt in prompts]
        for _ in range(new_tokens - 1):
            batch.clear()
            for seq in range(count):
                batch.add(next_token[seq], positions[seq], seq, True)
                positions[seq] += 1
            if C.llama_decode(context, batch.raw) != 0:
                raise RuntimeError("llama_decode failed during decode")
            next_token = [greedy_token(context, seq, model.n_vocab) for seq in range(count)]
        wall = time.perf_counter() - started
    finally:
        batch.close()
        C.llama_free(context)
    return DecodeTiming(
        sequences=count,
        generated_tokens=count * new_tokens,
        prefill_tokens=sum(len(prompt) for prompt in prompts),
        wall_s=wall,
    )
