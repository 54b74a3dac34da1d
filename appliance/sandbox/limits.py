"""How much the child that runs model-written code may take."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SandboxLimits(BaseModel):
    """Limits of the child; the parent kills it whole at `wall_s`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wall_s: float = Field(default=10.0, gt=0.0)
    cpu_s: int = Field(default=5, ge=1)
    #: each test call (and loading the code) gets its own alarm
    test_s: float = Field(default=2.0, gt=0.0)
    memory_mb: int = Field(default=512, ge=64)
    #: the largest file the child may write: its output and its results
    output_kb: int = Field(default=256, ge=1)
    #: RLIMIT_NPROC: processes and threads (process creation is refused outright by seccomp)
    tasks: int = Field(default=16, ge=1)
    #: size of the private work folder (a tmpfs) under kernel isolation
    disk_mb: int = Field(default=16, ge=1)
