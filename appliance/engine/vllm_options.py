"""What a models.toml entry may set for the vllm backend (docs/engine.md: "Options", "GPUs")."""

from __future__ import annotations

from pydantic import Field

from appliance.backends import BackendOptions, register_options
from appliance.engine.transformers_options import TorchDtype


@register_options("vllm")
class VllmOptions(BackendOptions):
    kv_budget_mb: int | None = Field(default=None, ge=1, description="KV cache memory (default: every slot fits)")
    dtype: TorchDtype | None = Field(default=None, description="weight dtype (default float32)")
    tensor_parallel_size: int | None = Field(default=None, ge=1, description="GPUs a layer is split over")
    pipeline_parallel_size: int | None = Field(default=None, ge=1, description="stages the layers are split in")
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0, description="share of GPU memory")

    def gpus(self) -> int:
        return (self.tensor_parallel_size or 1) * (self.pipeline_parallel_size or 1)
