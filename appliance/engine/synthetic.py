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

from appliance.catalog.synthetic_shapes import SyntheticShape

SPECIAL_IDS = 3  # 0 padding, 1 beginning, 2 end
EOS_ID = 2


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
