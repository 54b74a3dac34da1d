"""A PEFT LoRA adapter written as a GGUF LoRA, the form llama.cpp loads over a GGUF base.

llama.cpp names a LoRA pair after the base tensor it modifies (`blk.3.attn_q.weight.lora_a`), keeps
A as PEFT stores it ([rank, in]) and B as [out, rank], and scales by `adapter.lora.alpha / rank`.
One detail matters for Llama-family bases: the GGUF stores the query and key projections with their
rows permuted (the rotary halves interleaved), and transformers undoes that permutation when it
reads a GGUF. An adapter trained on those de-permuted weights must have the rows of its B permuted
the same way, or it lands on the wrong dimensions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from appliance.errors import ApplianceError

#: Hugging Face module names of a Llama-family layer -> llama.cpp's tensor names
LLAMA_MODULES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_PEFT_KEY = re.compile(r".*layers\.(\d+)\.(\w+\.\w+)\.lora_([AB])\.weight$")
SUPPORTED_ARCHITECTURES = ("llama",)


def base_shape(base_gguf: Path) -> tuple[str, int, int]:
    """The base GGUF's architecture and its attention heads (queries, keys/values)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(base_gguf))

    def value(key: str) -> Any:
        field = reader.get_field(key)
        if field is None:
            raise ApplianceError(f"{base_gguf}: no '{key}' in its metadata")
        return field.contents()

    architecture = str(value("general.architecture"))
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise ApplianceError(
            f"{base_gguf}: architecture '{architecture}' is not one the converter maps "
            f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    heads = int(value(f"{architecture}.attention.head_count"))
    return architecture, heads, int(value(f"{architecture}.attention.head_count_kv"))


def rotary_row_order(rows: np.ndarray, heads: int) -> np.ndarray:
    """Rows of a query/key projection in the order the Llama GGUF stores them: within each head,
    the first and second rotary halves interleaved."""
    per_head = rows.shape[0] // heads
    shaped = rows.reshape(heads, 2, per_head // 2, *rows.shape[1:])
    return shaped.swapaxes(1, 2).reshape(rows.shape)


def read_peft(folder: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A PEFT folder's config and its LoRA tensors (float32)."""
    config_path, weights_path = folder / "adapter_config.json", folder / "adapter_model.safetensors"
    for path in (config_path, weights_path):
        if not path.is_file():
            raise ApplianceError(f"{folder}: not a PEFT adapter folder ({path.name} missing)")
    config = json.loads(config_path.read_text())
    if config.get("peft_type", "LORA") != "LORA":
        raise ApplianceError(f"{config_path}: field 'peft_type': '{config.get('peft_type')}' is not LORA")
    from safetensors.numpy import load_file

    return config, {key: value.astype(np.float32) for key, value in load_file(str(weights_path)).items()}


def peft_to_gguf(folder: Path, base_gguf: Path, output: Path, *, dtype: str = "float16") -> Path:
    """Write the PEFT adapter in `folder` as a GGUF LoRA for the base `base_gguf`."""
    from gguf import GGUFWriter

    architecture, heads, kv_heads = base_shape(base_gguf)
    config, tensors = read_peft(folder)
    if config.get("use_rslora") or config.get("use_dora"):
        raise ApplianceError(f"{folder}: rsLoRA and DoRA adapters are not converted (plain LoRA only)")
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        raise ApplianceError(f"{folder}: per-module ranks or alphas are not converted (one rank, one alpha)")
    writer = GGUFWriter(str(output), architecture)
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(config["lora_alpha"]))
    written = 0
    for key in sorted(tensors, key=_layer_order):
        match = _PEFT_KEY.fullmatch(key)
        module = LLAMA_MODULES.get(match.group(2)) if match else None
        if match is None or module is None:
            raise ApplianceError(f"{folder}: tensor '{key}' is not a LoRA on a module the converter maps")
        layer, which = match.group(1), match.group(3)
        array = tensors[key]
        if which == "B" and module in ("attn_q", "attn_k"):
            array = rotary_row_order(array, heads if module == "attn_q" else kv_heads)
        writer.add_tensor(f"blk.{layer}.{module}.weight.lora_{which.lower()}", array.astype(dtype))
        written += 1
    if written == 0:
        raise ApplianceError(f"{folder}: the adapter holds no LoRA tensors")
    output.parent.mkdir(parents=True, exist_ok=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return output


def _layer_order(key: str) -> tuple[int, str]:
    match = _PEFT_KEY.fullmatch(key)
    return (int(match.group(1)), key) if match else (-1, key)
