"""What a models.toml entry may set for the llama_cpp backend (docs/engine.md: "Options")."""

from __future__ import annotations

from pydantic import Field

from appliance.backends import BackendOptions, register_options


@register_options("llama_cpp")
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
