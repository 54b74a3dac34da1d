"""The backends the engine knows: each backend module registers its opener, nothing here lists them.

A backend is one module `appliance/engine/<name>_backend.py` that calls
`register_backend` at import. Discovery imports those modules by name; each
keeps its heavy imports (torch, vllm) inside its functions, so knowing the
names costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from appliance.engine.backend import Backend
from appliance.plugins import Registry, import_submodules

#: (catalog, the model's entry, episodes live at once) -> a loaded backend. Typed loosely here, so that
#: the catalog (which checks backend names) can import this module; `factory.open_backend` is the typed call.
BackendOpener = Callable[..., Backend]
OpenerT = TypeVar("OpenerT", bound=BackendOpener)
MODULE_SUFFIX = "_backend"

BACKENDS: Registry[BackendOpener] = Registry(
    "backend", lambda: import_submodules("appliance.engine", suffix=MODULE_SUFFIX)
)
#: backends whose one loaded model serves its base and any number of LoRA adapters, request by request
#: (their opener takes `adapters=`); the others load an adapter entry on its own
ADAPTER_HOSTS: set[str] = set()


def register_backend(name: str, *, hosts_adapters: bool = False) -> Callable[[OpenerT], OpenerT]:
    """Decorate a backend module's opener: `@register_backend("llama_cpp")`."""

    def register(opener: OpenerT) -> OpenerT:
        BACKENDS.add(name, opener)
        if hosts_adapters:
            ADAPTER_HOSTS.add(name)
        return opener

    return register


def backend_names() -> list[str]:
    return sorted(BACKENDS.known())


def backend_opener(name: str) -> BackendOpener:
    return BACKENDS.get(name)


def hosts_adapters(name: str) -> bool:
    """Whether backend `name` serves a base and its adapters from one loaded model."""
    BACKENDS.known()
    return name in ADAPTER_HOSTS
