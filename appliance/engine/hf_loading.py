"""Loading weights with torch and transformers, and a Hugging Face folder made once from a GGUF file.

The transformers backend loads a folder, or a GGUF file through `gguf_file=` (transformers
dequantises it). vLLM cannot read our GGUFs, so `hf_folder_from_gguf` saves that dequantised model
once as a folder under the cache (`cache_dir()/hf/<file>-<sha256 prefix>-<dtype>`), stamped with
the GGUF's sha256: a changed file is converted again, and a folder left half-written by a kill is
never used (it is written aside and renamed when complete).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from appliance.catalog import cache_dir, sha256_of
from appliance.errors import ApplianceError

#: the file in a converted folder that holds the sha256 of the GGUF it came from
STAMP = "converted-from.sha256"


def import_torch_stack() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError:
        raise ApplianceError(
            "torch and transformers are needed (transformers backend, vLLM from a GGUF): pip install -e '.[hf]' "
            "(torch==2.13.0 is the CPU build)"
        ) from None
    return torch, transformers


def model_placement(torch: Any, device: str | None, dtype: str | None, attention: str | None) -> dict[str, Any]:
    """`from_pretrained` arguments from models.toml's device, dtype and attn_implementation."""
    placement: dict[str, Any] = {"dtype": "auto" if dtype == "auto" else getattr(torch, dtype or "float32")}
    if device == "auto":
        placement["device_map"] = "auto"
    if attention is not None:
        placement["attn_implementation"] = attention
    return placement


def load_pretrained(transformers: Any, name: str, path: Path, placement: dict[str, Any]) -> tuple[Any, Any]:
    """Tokenizer and model from a Hugging Face folder, or from a GGUF file (dequantised)."""
    if not path.exists():
        raise ApplianceError(f"model '{name}': {path} not found")
    source, extra = (str(path.parent), {"gguf_file": path.name}) if path.is_file() else (str(path), {})
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, local_files_only=True, **extra)
        model = transformers.AutoModelForCausalLM.from_pretrained(source, local_files_only=True, **placement, **extra)
    except (OSError, ValueError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ApplianceError(f"model '{name}': transformers could not load {path}: {first}") from None
    return tokenizer, model


def with_peft_adapter(model: Any, name: str, adapter: Path, scale: float) -> Any:
    """`model` with the PEFT LoRA of folder `adapter` on it at `scale` (kept apart from the weights)."""
    if not (adapter / "adapter_config.json").is_file():
        what = "a GGUF LoRA (llama_cpp only)" if adapter.suffix == ".gguf" else "not a PEFT adapter folder"
        raise ApplianceError(f"model '{name}': field 'adapter': {adapter} is {what}; this backend needs a PEFT folder")
    try:
        from peft import PeftModel
    except ImportError:
        raise ApplianceError(f"model '{name}': a PEFT adapter needs peft: pip install -e '.[hf]'") from None
    try:
        wrapped = PeftModel.from_pretrained(model, str(adapter), is_trainable=False)
    except (OSError, ValueError, RuntimeError, KeyError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ApplianceError(f"model '{name}': adapter {adapter} does not load on its base: {first}") from None
    if scale != 1.0:
        for module in wrapped.modules():
            scaling = getattr(module, "scaling", None)
            if isinstance(scaling, dict):  # PEFT's LoRA layers: alpha / rank per adapter
                for key in scaling:
                    scaling[key] *= scale
    return wrapped


def hf_folder_from_gguf(gguf: Path, name: str, dtype: str = "float32") -> Path:
    """The model of `gguf` as a Hugging Face folder (weights in `dtype`), converted on first use."""
    digest = sha256_of(gguf)
    target = cache_dir() / "hf" / f"{gguf.stem}-{digest[:16]}-{dtype}"
    if (target / STAMP).is_file() and (target / STAMP).read_text() == digest:
        return target
    torch, transformers = import_torch_stack()
    tokenizer, model = load_pretrained(transformers, name, gguf, model_placement(torch, None, dtype, None))
    # transformers marks a GGUF-loaded model as quantised and refuses to save it; its weights are
    # already dequantised, so the marking is dropped
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    (staging / STAMP).write_text(digest)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target
