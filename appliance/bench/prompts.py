"""The decode workloads' prompts, shared by every backend's bench (and free of any engine import)."""

from __future__ import annotations

import random

TOPICS = ["a lighthouse", "a dragon", "the sea", "a clock", "a garden", "a train", "winter", "a library"]


def bench_prompts(count: int, seed: int) -> list[str]:
    """Distinct chat-formatted prompts of similar length (ChatML, as the embedded SmolLM2 uses)."""
    rng = random.Random(seed)
    return [
        f"<|im_start|>user\nWrite a long story number {index} about {rng.choice(TOPICS)}.<|im_end|>\n"
        "<|im_start|>assistant\n"
        for index in range(count)
    ]
