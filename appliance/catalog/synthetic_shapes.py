"""The shapes a synthetic-weight model can take: a named preset or an architecture table.

models.toml names a shape (`synthetic = "llama-1b"`); the catalog checks it and the engine
(`engine/synthetic.py`) and the synthetic GGUF writer build it. Both read the shape from here, below
them, so the catalog needs nothing of the engine.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SyntheticShape(BaseModel):
    """A decoder-only (Llama-architecture) shape."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    layers: int = Field(ge=1)
    hidden_size: int = Field(ge=8)
    heads: int = Field(ge=1)
    kv_heads: int | None = Field(default=None, ge=1)
    intermediate_size: int | None = Field(default=None, ge=8)
    vocab_size: int = Field(default=32_000, ge=259)  # room for the 3 special ids and 256 bytes
    #: the output layer shares the embedding matrix (small Llamas) or has its own (Llama 3.1 8B)
    tie_embeddings: bool = True

    def parameters(self) -> int:
        """Weights of the shape, for the bench's bytes-per-step figure."""
        kv_heads = self.kv_heads or self.heads
        head_dim = self.hidden_size // self.heads
        attention = self.hidden_size * head_dim * (2 * self.heads + 2 * kv_heads)
        mlp = 3 * self.hidden_size * (self.intermediate_size or 4 * self.hidden_size)
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2)
        return self.layers * (attention + mlp + 2 * self.hidden_size) + self.hidden_size + embeddings


#: named shapes: the published configurations of SmolLM2-135M, Llama 3.2 1B and Llama 3.1 8B, and a tiny one
#: (a few MB with SmolLM2's vocabulary: a tokenizer donor that travels, or a quick test)
PRESETS: dict[str, SyntheticShape] = {
    "llama-tiny": SyntheticShape(layers=1, hidden_size=32, heads=1, intermediate_size=32, vocab_size=49_152),
    "llama-135m": SyntheticShape(
        layers=30, hidden_size=576, heads=9, kv_heads=3, intermediate_size=1536, vocab_size=49_152
    ),
    "llama-1b": SyntheticShape(
        layers=16, hidden_size=2048, heads=32, kv_heads=8, intermediate_size=8192, vocab_size=128_256
    ),
    "llama-8b": SyntheticShape(
        layers=32,
        hidden_size=4096,
        heads=32,
        kv_heads=8,
        intermediate_size=14_336,
        vocab_size=128_256,
        tie_embeddings=False,
    ),
}


def resolve_shape(synthetic: str | SyntheticShape) -> SyntheticShape:
    if isinstance(synthetic, SyntheticShape):
        return synthetic
    if synthetic not in PRESETS:
        raise ValueError(f"unknown synthetic shape '{synthetic}' (known: {', '.join(PRESETS)}, or a table)")
    return PRESETS[synthetic]
