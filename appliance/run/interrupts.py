"""Ctrl-C during a run: the first one stops gracefully, a second one stops at once.

The first SIGINT asks the runner to start no new episode; the episodes in progress finish and are
stored, and the run is marked interrupted (resumable). A second SIGINT ends the process at once
with exit code 130: episodes in progress are lost, finished ones are already stored (each was
written in its own transaction).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

INTERRUPTED_EXIT = 130


@dataclass
class StopRequest:
    """Set when the user asks the run to stop; the runner checks it before starting each episode."""

    requested: bool = False


class RunInterrupted(Exception):
    """The run stopped at a user's request; its finished episodes are stored and it can be resumed."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run '{run_id}' interrupted")
        self.run_id = run_id


@contextmanager
def graceful_interrupts(stop: StopRequest) -> Iterator[StopRequest]:
    """SIGINT handlers for the duration of a run; the previous handler comes back afterwards."""

    def stop_now(signum: int, frame: FrameType | None) -> None:
        os.write(
            sys.stderr.fileno(),
            b"stopped at once: episodes in progress are not stored; finished episodes are\n",
        )
        os._exit(INTERRUPTED_EXIT)

    def stop_gracefully(signum: int, frame: FrameType | None) -> None:
        stop.requested = True
        signal.signal(signal.SIGINT, stop_now)
        os.write(
            sys.stderr.fileno(),
            b"stopping: the episodes in progress finish and are stored (Ctrl-C again stops at once)\n",
        )

    previous = signal.signal(signal.SIGINT, stop_gracefully)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)
