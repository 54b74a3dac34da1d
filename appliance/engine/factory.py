"""Opening the right backend for a catalog entry."""

from __future__ import annotations

from appliance.catalog import Catalog, ModelSpec
from appliance.engine.backend import Backend


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
            kv_budget_mb=spec.kv_budget_mb,
        )
    if spec.backend == "transformers":
        from appliance.engine.transformers_backend import TransformersBackend

        return TransformersBackend(
            catalog.resolve_path(spec),
            name=spec.name,
            chat_format=spec.chat_format,
            slots=max(1, min(spec.slots, parallel * 4)),
            threads=spec.threads,
        )
    from appliance.engine.vllm_backend import VllmBackend

    return VllmBackend(catalog.resolve_path(spec), spec)
