"""What the benchmark ran on, recorded beside its figures."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def describe_machine() -> dict[str, Any]:
    cpu = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory_gb = None
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal"):
                memory_gb = round(int(line.split()[1]) / 2**20, 1)
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": memory_gb,
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "gpu": None,
    }
