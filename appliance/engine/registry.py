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


def register_backend(name: str) -> Callable[[OpenerT], OpenerT]:
    """Decorate a backend module's opener: `@register_backend("llama_cpp")`."""

    def register(opener: OpenerT) -> OpenerT:
        BACKENDS.add(name, opener)
        return opener

    return register


def backend_names() -> list[str]:
    return sorted(BACKENDS.known())


def backend_opener(name: str) -> BackendOpener:
    return BACKENDS.get(name)
