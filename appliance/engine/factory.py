"""Opening the right backend for a catalog entry."""

from __future__ import annotations

from appliance.catalog import Catalog, ModelSpec
from appliance.engine.backend import Backend
from appliance.errors import ApplianceError


def open_backend(catalog: Catalog, spec: ModelSpec, *, parallel: int) -> Backend:
    """Load the model of `spec`; `parallel` bounds how many sequences are worth a slot."""
    if spec.backend == "llama_cpp":
        from appliance.engine.llama_cpp_backend import LlamaCppBackend

        return LlamaCppBackend(
            catalog.resolve_path(spec),
            name=spec.name,
            chat_format=spec.chat_format,
            context_length=spec.context_length,
            slots=max(1, min(spec.slots, parallel * 4)),
            threads=spec.threads,
            exact_kv=spec.exact_kv,
            kv_unified=spec.kv_unified,
            flash_attention=spec.flash_attention,
        )
    raise ApplianceError(
        f"{catalog.source} [models.{spec.name}]: backend '{spec.backend}' is not available in this version "
        "(only llama_cpp so far)"
    )
