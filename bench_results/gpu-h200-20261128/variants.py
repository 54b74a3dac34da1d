"""135M-shape variants for the crash probe: which property of the shape makes llama.cpp's CUDA build fail."""

import sys
from pathlib import Path

from appliance.bench.synthetic_gguf import write_synthetic_gguf
from appliance.catalog.synthetic_shapes import PRESETS

donor, out = Path(sys.argv[1]), Path(sys.argv[2])
base = PRESETS["llama-135m"]
variants = {
    "135m": base,
    "135m-kv9": base.model_copy(update={"kv_heads": 9}),
    "135m-heads8": base.model_copy(update={"heads": 8, "kv_heads": 2, "hidden_size": 512}),
    "135m-vocab128k": base.model_copy(update={"vocab_size": 128_256}),
    "135m-untied": base.model_copy(update={"tie_embeddings": False}),
    "135m-layers16": base.model_copy(update={"layers": 16}),
}
for name, shape in variants.items():
    write_synthetic_gguf(donor, shape, out / f"{name}.gguf", weight_type="F16")
    print(name, flush=True)
