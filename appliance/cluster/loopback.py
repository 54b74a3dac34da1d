"""A network of its own for a local Ray cluster: the loopback and nothing else.

Ray 2.60's servers (its control store, raylets, workers, agents) listen on every interface whatever
node address they are given: its gRPC servers add a 0.0.0.0 listener of their own. Started from a
thread that has a network namespace of its own, with only the loopback up, every process of the
cluster inherits that namespace, and "every interface" is the loopback: nothing outside the
machine, nor any other process on it, can reach them. The appliance itself needs no network.

Making the namespace needs root (CAP_SYS_ADMIN). An ordinary user would need a user namespace too,
which a process that already runs threads cannot enter; there the cluster stays on the host's
network, behind Ray's token authentication (docs/scale-out.md).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
_IFREQ = "16sH14x"  # struct ifreq: the interface's name, then its flags


class LoopbackNetwork:
    """The calling thread (the one that starts Ray, so every Ray process) in a new network namespace
    with its loopback up, until `leave` returns it to the namespace it came from (when its cluster is
    shut down: the driver's own later connections, a browser driver's say, are the host's again)."""

    def __init__(self) -> None:
        self._previous: int | None = None

    def enter(self) -> str | None:
        """Returns why the thread could not move, or None."""
        if os.geteuid() != 0:
            return "a network namespace needs root; an ordinary user's cluster listens on the host's interfaces"
        libc = ctypes.CDLL(None, use_errno=True)
        previous = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        if libc.unshare(CLONE_NEWNET) != 0:
            os.close(previous)
            return f"unshare(CLONE_NEWNET) failed: {os.strerror(ctypes.get_errno())}"
        self._previous = previous
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as control:
            request = struct.pack(_IFREQ, b"lo", 0)
            flags = struct.unpack(_IFREQ, fcntl.ioctl(control, SIOCGIFFLAGS, request))[1]
            fcntl.ioctl(control, SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | IFF_UP))
        return None

    def leave(self) -> None:
        if self._previous is None:
            return
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            if libc.setns(self._previous, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "returning to the host's network namespace failed")
        finally:
            os.close(self._previous)
            self._previous = None
