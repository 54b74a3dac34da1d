"""Loading weights with torch and transformers, and a Hugging Face folder made once from a GGUF file.

transformers reads a GGUF through `gguf_file=` and dequantises it, but slowly (it parses the file's
metadata once for the config, once for the tokenizer and once for the weights: 18 s a parse for
Gemma's 262k-token vocabulary on a 2-core machine), and vLLM cannot read our GGUFs at all. So a GGUF
is dequantised once, parsing it once, and saved as a folder under the cache
(`cache_dir()/hf/<file>-<sha256 prefix>-<dtype>`) that the transformers and vLLM backends both load.
The folder is stamped with the GGUF's sha256: a changed file is converted again, and a folder left
half-written by a kill is never used (it is written aside and renamed when complete).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from appliance.catalog.models import cache_dir, sha256_of, sha256_of_tree
from appliance.errors import ApplianceError, first_line
from appliance.paths import staging_path

#: the file in a converted folder that holds the sha256 of the GGUF it came from and the conversion's
#: version (a folder made by an older conversion is made again)
STAMP = "converted-from.sha256"
CONVERSION = "v2: BOS as the GGUF says"


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


def weights_device(torch: Any, name: str, device: str | None) -> str:
    """Where the weights go unless accelerate places them ("auto" on a real model): the named device,
    else the first GPU, else the CPU. A named GPU this torch cannot reach is a one-line error, not
    torch's traceback from deep inside the first copy."""
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    missing = None
    if device.startswith("cuda"):
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (torch.device(device).index or 0) >= gpus:
            missing = f"torch sees {gpus} CUDA GPU(s) here"
    elif device == "mps" and not torch.backends.mps.is_available():
        missing = "torch sees no mps device here"
    if missing:
        raise ApplianceError(f"model '{name}': field 'device': {device} is not available ({missing})")
    return device


def load_pretrained(transformers: Any, name: str, path: Path, placement: dict[str, Any]) -> tuple[Any, Any]:
    """Tokenizer and model from a Hugging Face folder, or from a GGUF file through the float32 folder
    made once from it (`placement`'s dtype applies when that folder is loaded)."""
    if not path.exists():
        raise ApplianceError(f"model '{name}': {path} not found")
    if path.is_file():
        path = hf_folder_from_gguf(path, name)
    return _from_pretrained(transformers, name, path, placement)


def _from_pretrained(transformers: Any, name: str, path: Path, placement: dict[str, Any]) -> tuple[Any, Any]:
    """Tokenizer and model from a folder, or from a GGUF file dequantised by transformers."""
    source, extra = (str(path.parent), {"gguf_file": path.name}) if path.is_file() else (str(path), {})
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, local_files_only=True, **extra)
        model = transformers.AutoModelForCausalLM.from_pretrained(source, local_files_only=True, **placement, **extra)
    except (OSError, ValueError) as error:
        raise ApplianceError(f"model '{name}': transformers could not load {path}: {first_line(error)}") from None
    return tokenizer, model


#: PEFT's name for "no adapter" in a mixed-adapter batch
PEFT_BASE = "__base__"


def peft_adapter_folder(name: str, adapter: Path) -> Path:
    """`adapter` if it is a PEFT folder; otherwise one line saying what it is instead."""
    if (adapter / "adapter_config.json").is_file():
        return adapter
    if not adapter.exists():
        raise ApplianceError(f"model '{name}': field 'adapter': {adapter} not found")
    what = "a GGUF LoRA (llama_cpp only)" if adapter.suffix == ".gguf" else "not a PEFT adapter folder"
    raise ApplianceError(f"model '{name}': field 'adapter': {adapter} is {what}; this backend needs a PEFT folder")


def with_peft_adapters(model: Any, adapters: Mapping[str, tuple[Path, float]]) -> Any:
    """`model` with each PEFT LoRA of `adapters` (entry name -> folder, scale) loaded under its entry
    name, kept apart from the weights, so a batch can mix them (`adapter_names=` per row)."""
    try:
        from peft import PeftModel
    except ImportError:
        first = next(iter(adapters))
        raise ApplianceError(f"model '{first}': a PEFT adapter needs peft: pip install -e '.[hf]'") from None
    wrapped: Any = model
    for name, (adapter, scale) in adapters.items():
        folder = peft_adapter_folder(name, adapter)
        try:
            if wrapped is model:
                wrapped = PeftModel.from_pretrained(model, str(folder), adapter_name=name, is_trainable=False)
            else:
                wrapped.load_adapter(str(folder), adapter_name=name, is_trainable=False)
        except (OSError, ValueError, RuntimeError, KeyError) as error:
            lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
            first = next((line for line in lines if "mismatch" in line), lines[0])  # torch's shape lines come second
            raise ApplianceError(f"model '{name}': adapter {folder} does not load on its base: {first}") from None
        if scale != 1.0:
            for module in wrapped.modules():
                scaling = getattr(module, "scaling", None)
                if isinstance(scaling, dict) and name in scaling:  # PEFT's LoRA layers: alpha / rank per adapter
                    scaling[name] *= scale
    return wrapped


def scaled_peft_folder(name: str, adapter: Path, scale: float) -> Path:
    """A PEFT folder whose LoRA is `adapter`'s times `scale`, for engines that take no scale (vLLM):
    `adapter` itself at 1, else a copy of it with `lora_alpha` (and any per-module alphas) multiplied,
    made once under the cache folder. The entry is named by the adapter's content, which any number of
    folders may share, so it holds copies of the weights, never links that die with one of them."""
    folder = peft_adapter_folder(name, adapter)
    if scale == 1.0:
        return folder
    target = cache_dir() / "lora" / f"{sha256_of_tree(folder)[:16]}-x{scale:g}"

    def made(candidate: Path) -> bool:  # an entry of older versions held links, which may now lead nowhere
        config = candidate / "adapter_config.json"
        return config.is_file() and all(file.is_file() and not file.is_symlink() for file in candidate.iterdir())

    if made(target):
        return target
    config = json.loads((folder / "adapter_config.json").read_text())
    config["lora_alpha"] = config.get("lora_alpha", config.get("r", 8)) * scale
    config["alpha_pattern"] = {key: alpha * scale for key, alpha in (config.get("alpha_pattern") or {}).items()}
    staging = staging_path(target)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for file in folder.iterdir():  # the weights alone: a trainer's checkpoint also holds its optimizer state
        if file.is_file() and file.name.startswith(("adapter_model", "new_embeddings")):
            shutil.copyfile(file, staging / file.name)
    (staging / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return _publish(staging, target, made)


def _publish(staging: Path, target: Path, ready: Callable[[Path], bool]) -> Path:
    """Move a finished cache folder into place, unless another process (a parallel run, a Ray
    worker) finished the same folder first: a folder in use is never replaced."""
    if not ready(target):
        shutil.rmtree(target, ignore_errors=True)
        try:
            staging.rename(target)
            return target
        except OSError:  # another process moved its copy in between
            pass
    shutil.rmtree(staging, ignore_errors=True)
    return target


def check_peft_fits(name: str, adapter: Path, base: Path) -> None:
    """Refuse, in one line, a PEFT LoRA whose matrices do not fit the weights of the Hugging Face folder
    `base` (read from the safetensors headers alone). vLLM would load such an adapter without a word."""
    from safetensors import safe_open

    def shapes(files: list[Path]) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for file in files:
            with safe_open(str(file), framework="numpy") as tensors:
                found |= {key: list(tensors.get_slice(key).get_shape()) for key in tensors.keys()}  # noqa: SIM118
        return found

    weights = shapes(sorted(base.glob("*.safetensors")))
    for key, shape in shapes(sorted(adapter.glob("adapter_model*.safetensors"))).items():
        module, _, part = key.removeprefix("base_model.model.").rpartition(".lora_")
        if part not in ("A.weight", "B.weight"):
            continue
        target = weights.get(f"{module}.weight")
        if target is None:
            raise ApplianceError(f"model '{name}': adapter {adapter}: {module} is not a weight of base {base.name}")
        side = target[1] if part == "A.weight" else target[0]  # A reads the layer's input, B writes its output
        if shape[1 if part == "A.weight" else 0] != side:
            raise ApplianceError(
                f"model '{name}': adapter {adapter}: {key} has shape {shape}, which does not fit "
                f"{module}.weight {target} of base {base.name}"
            )


def peft_rank(folder: Path) -> int:
    """The largest LoRA rank of a PEFT folder (its `r`, or a per-module rank above it)."""
    config = json.loads((folder / "adapter_config.json").read_text())
    return max([int(config.get("r", 8)), *(int(rank) for rank in (config.get("rank_pattern") or {}).values())])


_READER_SWAP = threading.Lock()


@contextmanager
def _parsed_once(name: str, gguf: Path) -> Iterator[Any]:
    """The GGUF's reader, parsed once; inside the block every `gguf.GGUFReader` of this file (the
    three transformers opens) is that one. Readers of other files, or opened otherwise, are new."""
    gguf_package: Any = importlib.import_module("gguf")  # its reader class is swapped for the block
    opened = gguf_package.GGUFReader
    try:
        reader = opened(str(gguf))
    except (OSError, ValueError, IndexError, KeyError) as error:  # what gguf raises on a bad file
        raise ApplianceError(f"model '{name}': transformers could not load {gguf}: {first_line(error)}") from None
    target = os.path.realpath(gguf)

    def shared(path: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs and os.path.realpath(path) == target:
            return reader
        return opened(path, *args, **kwargs)

    with _READER_SWAP:
        gguf_package.GGUFReader = shared
        try:
            yield reader
        finally:
            gguf_package.GGUFReader = opened


def _gguf_flag(reader: Any, key: str) -> bool:
    """A boolean of the GGUF's metadata (False when absent)."""
    field = reader.fields.get(key)
    return bool(field is not None and field.parts[field.data[0]][0])


def hf_folder_from_gguf(gguf: Path, name: str, dtype: str = "float32") -> Path:
    """The model of `gguf` as a Hugging Face folder (weights in `dtype`), converted on first use."""
    digest = sha256_of(gguf)
    stamp = f"{digest} {CONVERSION}"
    target = cache_dir() / "hf" / f"{gguf.stem}-{digest[:16]}-{dtype}"

    def converted(candidate: Path) -> bool:
        return (candidate / STAMP).is_file() and (candidate / STAMP).read_text() == stamp

    if converted(target):
        return target
    torch, transformers = import_torch_stack()
    with _parsed_once(name, gguf) as reader:
        tokenizer, model = _from_pretrained(transformers, name, gguf, model_placement(torch, None, dtype, None))
    # transformers' GGUF tokenizer never adds the BOS token; a model trained with one (Gemma) then
    # reads every prompt wrong (" Paris" after "The capital of France is": -18.5 nats, not -5.5)
    tokenizer.add_bos_token = _gguf_flag(reader, "tokenizer.ggml.add_bos_token")
    # transformers marks a GGUF-loaded model as quantised and refuses to save it; its weights are
    # already dequantised, so the marking is dropped
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = staging_path(target)
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    (staging / STAMP).write_text(stamp)
    return _publish(staging, target, converted)
