"""What the benchmark ran on, recorded beside its figures."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from appliance.engine.host_memory import physical_memory_mb


def describe_machine() -> dict[str, Any]:
    cpu = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory_mb = physical_memory_mb()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": None if memory_mb is None else round(memory_mb / 2**10, 1),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "gpu": describe_gpu(),
    }


def describe_gpu() -> dict[str, Any] | None:
    """The first NVIDIA GPU as nvidia-smi reports it (None where there is none)."""
    fields = nvidia_smi("name,driver_version,memory.total")
    if fields is None or len(fields) != 3:
        return None
    name, driver, memory = fields
    return {"name": name, "driver": driver, "memory_mb": memory.split()[0]}


def nvidia_smi(query: str) -> list[str] | None:
    """The first GPU's values of an nvidia-smi `--query-gpu` list; None without the tool or a GPU."""
    try:
        result = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = result.stdout.strip().splitlines()
    return [value.strip() for value in lines[0].split(",")] if result.returncode == 0 and lines else None
