"""A synthetic-weight GGUF: a preset Llama shape with random weights and a real model's tokenizer.

The llama.cpp twin of `engine/synthetic.py`: decode and prefill rates do not
depend on weight values, so our llama.cpp engine can be measured on a GPU at a
1B or 8B shape from a file written on that machine (a lent GPU machine takes
64 MiB of files per call; a 1B GGUF does not travel). The tokenizer and chat
template come from a donor GGUF (the embedded SmolLM2), so prompts tokenize as
they do for the real model; a shape with a larger vocabulary gets unused
filler tokens. The text it generates is noise: throughput only.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from appliance.catalog.synthetic_shapes import SyntheticShape, resolve_shape

#: weight types a synthetic GGUF can be written in (matrices; norms stay float32)
WEIGHT_TYPES = ("F16", "Q8_0", "Q4_1")
_UNUSED_TOKEN = 5  # llama.cpp's token type for a slot no text maps to


def write_synthetic_gguf(
    donor: Path, shape: str | SyntheticShape, out: Path, *, weight_type: str = "F16", seed: int = 0
) -> Path:
    """Write `shape` with seeded random weights in `weight_type` to `out`, with `donor`'s tokenizer."""
    import gguf
    import numpy as np

    if weight_type not in WEIGHT_TYPES:
        raise ValueError(f"weight type '{weight_type}' is not one of {', '.join(WEIGHT_TYPES)}")
    shape = resolve_shape(shape)
    reader = gguf.GGUFReader(donor)
    tokens = list(reader.fields["tokenizer.ggml.tokens"].contents())
    if shape.vocab_size < len(tokens):
        raise ValueError(f"shape vocabulary {shape.vocab_size} is smaller than {donor.name}'s {len(tokens)} tokens")
    filler = shape.vocab_size - len(tokens)
    writer = gguf.GGUFWriter(out, "llama")
    _hyperparameters(writer, shape, weight_type)
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value = field.contents()
        if key == "tokenizer.ggml.tokens":
            value = tokens + [f"<synthetic_unused_{index}>" for index in range(filler)]
        elif key == "tokenizer.ggml.token_type":
            value = list(value) + [_UNUSED_TOKEN] * filler
        elif key == "tokenizer.ggml.scores":
            value = list(value) + [0.0] * filler
        writer.add_key_value(key, value, field.types[0], field.types[-1] if len(field.types) > 1 else None)
    rng = np.random.default_rng(seed)
    for name, dims in _tensor_shapes(shape):
        if len(dims) == 1:
            writer.add_tensor(name, np.ones(dims, dtype=np.float32))
            continue
        weights = rng.standard_normal(dims, dtype=np.float32) * 0.02
        # as llama.cpp's own 4-bit files do, the embedding table stays at 8 bits
        embedding_type = "Q8_0" if weight_type == "Q4_1" else weight_type
        _add_matrix(writer, name, weights, embedding_type if name == "token_embd.weight" else weight_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def main(argv: list[str] | None = None) -> None:
    """`python -m appliance.bench.synthetic_gguf --donor F --out DIR [--type F16] llama-1b ...` (a file per shape)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--donor", type=Path, required=True, help="the GGUF whose tokenizer the files take")
    parser.add_argument("--out", type=Path, required=True, help="folder for synthetic-<shape>-<type>.gguf")
    parser.add_argument("--type", choices=WEIGHT_TYPES, default="F16", help="the matrices' type")
    parser.add_argument("shapes", nargs="+", help="preset shapes, e.g. llama-135m llama-1b")
    arguments = parser.parse_args(argv)
    arguments.out.mkdir(parents=True, exist_ok=True)
    for shape in arguments.shapes:
        started = time.perf_counter()
        target = arguments.out / f"synthetic-{shape.removeprefix('llama-')}-{arguments.type.lower()}.gguf"
        write_synthetic_gguf(arguments.donor, shape, target, weight_type=arguments.type)
        size = target.stat().st_size / 2**20
        print(f"{target}: {size:.1f} MiB in {time.perf_counter() - started:.1f} s", flush=True)


def _hyperparameters(writer: Any, shape: SyntheticShape, weight_type: str) -> None:
    import gguf

    heads = shape.heads
    writer.add_name(f"synthetic {shape.layers}x{shape.hidden_size}")
    writer.add_block_count(shape.layers)
    writer.add_context_length(8192)
    writer.add_embedding_length(shape.hidden_size)
    writer.add_feed_forward_length(shape.intermediate_size or 4 * shape.hidden_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(shape.kv_heads or heads)
    writer.add_rope_freq_base(10_000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(shape.hidden_size // heads)
    writer.add_vocab_size(shape.vocab_size)
    file_types = {"F16": gguf.LlamaFileType.MOSTLY_F16, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
    writer.add_file_type(file_types.get(weight_type, gguf.LlamaFileType.MOSTLY_Q4_1))


def _tensor_shapes(shape: SyntheticShape) -> list[tuple[str, tuple[int, ...]]]:
    """llama.cpp's tensor names with numpy shapes (rows = outputs)."""
    hidden = shape.hidden_size
    head_dim = hidden // shape.heads
    kv = (shape.kv_heads or shape.heads) * head_dim
    ffn = shape.intermediate_size or 4 * hidden
    tensors: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (shape.vocab_size, hidden))]
    for layer in range(shape.layers):
        block = f"blk.{layer}"
        tensors += [
            (f"{block}.attn_norm.weight", (hidden,)),
            (f"{block}.attn_q.weight", (shape.heads * head_dim, hidden)),
            (f"{block}.attn_k.weight", (kv, hidden)),
            (f"{block}.attn_v.weight", (kv, hidden)),
            (f"{block}.attn_output.weight", (hidden, shape.heads * head_dim)),
            (f"{block}.ffn_norm.weight", (hidden,)),
            (f"{block}.ffn_gate.weight", (ffn, hidden)),
            (f"{block}.ffn_up.weight", (ffn, hidden)),
            (f"{block}.ffn_down.weight", (hidden, ffn)),
        ]
    tensors.append(("output_norm.weight", (hidden,)))
    if not shape.tie_embeddings:
        tensors.append(("output.weight", (shape.vocab_size, hidden)))
    return tensors


def _add_matrix(writer: Any, name: str, weights: Any, weight_type: str) -> None:
    import gguf
    import numpy as np

    if weight_type == "F16":
        writer.add_tensor(name, weights.astype(np.float16))
        return
    qtype = gguf.GGMLQuantizationType[weight_type]
    writer.add_tensor(name, gguf.quants.quantize(weights, qtype), raw_dtype=qtype)


if __name__ == "__main__":
    main()
