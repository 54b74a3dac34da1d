"""The backends the engine knows: each backend module registers its opener, nothing here lists them.

A backend is one module `appliance/engine/<name>_backend.py` that calls
`register_backend` at import. Discovery imports those modules by name; each
keeps its heavy imports (torch, vllm) inside its functions, so knowing the
names costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from appliance.engine.backend import Backend
from appliance.errors import ApplianceError
from appliance.plugins import import_submodules

if TYPE_CHECKING:
    from appliance.catalog import Catalog, ModelSpec

#: (catalog, the model's entry, episodes live at once) -> a loaded backend
BackendOpener = Callable[["Catalog", "ModelSpec", int], Backend]
MODULE_SUFFIX = "_backend"

_OPENERS: dict[str, BackendOpener] = {}
_discovered = False


def register_backend(name: str) -> Callable[[BackendOpener], BackendOpener]:
    """Decorate a backend module's opener: `@register_backend("llama_cpp")`."""

    def register(opener: BackendOpener) -> BackendOpener:
        known = _OPENERS.get(name)
        if known is not None and known is not opener:
            raise ApplianceError(f"backend '{name}' is registered twice")
        _OPENERS[name] = opener
        return opener

    return register


def _discover() -> None:
    global _discovered
    if not _discovered:
        _discovered = True
        import_submodules("appliance.engine", suffix=MODULE_SUFFIX)


def backend_names() -> list[str]:
    _discover()
    return sorted(_OPENERS)


def backend_opener(name: str) -> BackendOpener:
    _discover()
    opener = _OPENERS.get(name)
    if opener is None:
        raise ApplianceError(f"unknown backend '{name}' (known: {', '.join(backend_names())})")
    return opener
