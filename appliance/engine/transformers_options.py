"""What a models.toml entry may set for the transformers backend (docs/engine.md: "Options")."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from appliance.backends import BackendOptions, register_options

#: the weights' dtype in memory (transformers and vLLM; both default to float32 here)
TorchDtype = Literal["auto", "float32", "float16", "bfloat16"]
AttentionImplementation = Literal["eager", "sdpa", "flash_attention_2", "flex_attention"]
_DEVICE = re.compile(r"cpu|cuda(:\d+)?|mps|auto")


@register_options("transformers")
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
