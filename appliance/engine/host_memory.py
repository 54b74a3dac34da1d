"""How much memory this machine has, and how much of it this process may use (a container's limit)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

#: Where a container's memory limit is read: cgroup v2, then v1 (v1 shows a huge number when unlimited).
CGROUP_MEMORY_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def physical_memory_mb() -> int | None:
    """The machine's memory (MemTotal); None without sysconf (Windows)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError, AttributeError):  # no sysconf, or no such name
        return None


def usable_memory_mb(limits: Iterable[Path] = CGROUP_MEMORY_LIMITS) -> int | None:
    """Physical memory, or the container's cgroup limit where that is less (the first limit file found
    decides); None without sysconf."""
    memory = physical_memory_mb()
    if memory is None:
        return None
    for path in limits:
        try:
            limit = path.read_text().strip()
        except OSError:
            continue
        if limit.isdigit():  # "max": no limit
            memory = min(memory, int(limit) // 2**20)
        break
    return memory
