"""A process's resident memory, for benches that report a peak per arm or per point.

Arms of one bench run in one process, one after another. The kernel's
high-water mark (VmHWM) can be reset to the current RSS by writing 5 to
/proc/self/clear_refs, so each arm's peak is its own, on top of whatever the
process held when it began. Where that file cannot be written, the peak is
the process's since it started: an upper bound.
"""

from __future__ import annotations

import resource
from pathlib import Path
from types import TracebackType

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kilobytes(field: str) -> int | None:
    if not STATUS.is_file():
        return None
    for line in STATUS.read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return None


def peak_rss_kilobytes() -> int:
    """This process's high-water RSS. VmHWM, unlike ru_maxrss, does not carry over the
    parent's peak across fork and exec, and can be reset."""
    found = _status_kilobytes("VmHWM")
    return found if found is not None else int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def rss_kilobytes() -> int:
    """This process's resident memory now (0 where /proc is missing)."""
    return _status_kilobytes("VmRSS") or 0


def reset_peak_rss() -> bool:
    """Set the high-water mark to the current RSS; False where the kernel does not allow it."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


class PeakRss:
    """`with PeakRss() as window:` ... `window.peak_mb`: the highest RSS inside the block, and `start_mb`,
    what the process held as it began (left over from earlier arms, imports)."""

    def __init__(self) -> None:
        self.start_mb = 0.0
        self.peak_mb = 0.0
        #: False: the mark could not be reset, and peak_mb is the process's since it started
        self.own = False

    def __enter__(self) -> PeakRss:
        self.own = reset_peak_rss()
        self.start_mb = rss_kilobytes() / 1024
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.peak_mb = peak_rss_kilobytes() / 1024
