"""Synthetic-weight models: a real architecture with random weights, for throughput only.

Decode and prefill rates do not depend on weight values, so a GPU's speed for
a 1B or 8B shape can be measured with nothing to download. Such a model has
no tokenizer: text becomes our own byte-level token ids (each UTF-8 byte
shifted past three special ids), which is all a throughput workload needs.
It never produces an evaluation score: a run, a rescoring or a calibration
refuses it for any role (`Catalog.refuse_synthetic`).
"""

from __future__ import annotations

from typing import Any

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

SPECIAL_IDS = 3  # 0 padding, 1 beginning, 2 end
EOS_ID = 2


def resolve_shape(synthetic: str | SyntheticShape) -> SyntheticShape:
    if isinstance(synthetic, SyntheticShape):
        return synthetic
    if synthetic not in PRESETS:
        raise ValueError(f"unknown synthetic shape '{synthetic}' (known: {', '.join(PRESETS)}, or a table)")
    return PRESETS[synthetic]


class ByteTokens:
    """The token ids of a synthetic model: UTF-8 bytes shifted past the special ids.

    It offers the few tokenizer methods the transformers backend calls."""

    eos_token_id = EOS_ID
    pad_token_id = 0
    chat_template = None

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [SPECIAL_IDS + byte for byte in text.encode("utf-8")]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        data = bytes(i - SPECIAL_IDS for i in ids if SPECIAL_IDS <= i < SPECIAL_IDS + 256)
        return data.decode("utf-8", errors="replace")


def build_synthetic_model(
    transformers: Any, torch: Any, shape: SyntheticShape, dtype: Any, device: str = "cpu", seed: int = 0
) -> Any:
    """A Llama-architecture model of `shape` with random weights (seeded), built in `dtype` directly on
    `device`: an 8B shape initialised on the CPU and then copied would take minutes and 16 GB of host
    memory before a GPU measures anything."""
    config = transformers.LlamaConfig(
        num_hidden_layers=shape.layers,
        hidden_size=shape.hidden_size,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads or shape.heads,
        intermediate_size=shape.intermediate_size or 4 * shape.hidden_size,
        vocab_size=shape.vocab_size,
        tie_word_embeddings=shape.tie_embeddings,
        bos_token_id=1,
        eos_token_id=EOS_ID,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
