"""Decoding parameters as models.toml, roles and requests write them: each layer sets only what it
means to change, and the layers merge (`Sampling.merged`) before a backend gets every field decided
(`engine.types.ResolvedSampling`). It sits below the catalog and the engine, which both read it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Sampling(BaseModel):
    """Decoding parameters. `None` means "not set here" so that layers can be merged."""

    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repeat_penalty: float | None = Field(default=None, gt=0.0)
    max_tokens: int | None = Field(default=None, ge=1)
    stop: list[str] | None = None
    seed: int | None = Field(default=None, ge=0)
    ignore_eos: bool | None = None

    def merged(self, *overrides: Sampling | None) -> Sampling:
        """Later layers win, field by field, where they set a value."""
        values = self.model_dump()
        for layer in overrides:
            if layer is None:
                continue
            values.update({key: value for key, value in layer.model_dump().items() if value is not None})
        return Sampling(**values)
