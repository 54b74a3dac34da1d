"""The runtime made reachable for the sandbox's unprivileged uid, without touching the host's modes.

When the appliance runs as root, the sandbox starts under an unprivileged host uid (isolation.py),
and bubblewrap resolves what it binds with that uid's rights. An interpreter under a folder only
root may enter (pyenv under /root, say) is then out of its reach. Rather than loosen the host,
a helper in a mount namespace of its own lays a small tmpfs over each such folder and binds the
runtime's folders back at their own paths; bubblewrap is started inside that namespace (nsenter).
The host's mounts and modes stay as they are.

This file also runs as the helper itself (`python -I -S -c`), so it imports the standard library only.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import stat
import subprocess
import sys
from collections.abc import Sequence

MS_BIND = 0x1000
MS_REC = 0x4000
_READY = "ready"


def hidden_ancestors(paths: Sequence[str]) -> list[str]:
    """The highest folder above each path that others may not enter (one per path that has one)."""
    hidden: set[str] = set()
    for path in paths:
        parts = os.path.realpath(path).split(os.sep)[1:]
        for depth in range(1, len(parts) + 1):
            folder = os.sep + os.sep.join(parts[:depth])
            if os.path.isdir(folder) and not os.stat(folder).st_mode & stat.S_IXOTH:
                hidden.add(folder)
                break
    return sorted(hidden)


def expose(paths: Sequence[str]) -> None:
    """In this process's own mount namespace (root): a tmpfs over each hidden ancestor of `paths`,
    with `paths` bound back at their own places, so that any uid may reach them."""
    libc = ctypes.CDLL(None, use_errno=True)
    wanted = sorted({os.path.realpath(p) for p in paths})
    for folder in hidden_ancestors(wanted):
        inside = [p for p in wanted if p.startswith(folder + os.sep)]
        outermost = [p for p in inside if not any(p.startswith(q + os.sep) for q in inside if q != p)]
        handles = {p: os.open(p, os.O_PATH) for p in outermost}
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=1m", "appliance-runtime", folder], check=True)
        for path, handle in handles.items():
            os.makedirs(path, mode=0o755, exist_ok=True)
            source = f"/proc/self/fd/{handle}".encode()
            if libc.mount(source, path.encode(), None, MS_BIND | MS_REC, None) != 0:
                raise OSError(ctypes.get_errno(), f"binding {path} back failed")
            os.close(handle)


class ExposedRuntime:
    """The helper holding the namespace; it lives as long as this process (its stdin is our pipe)."""

    def __init__(self, paths: Sequence[str]) -> None:
        source = open(__file__, encoding="utf-8").read()  # noqa: SIM115 - read once
        interpreter = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
        self.helper = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", interpreter, "-I", "-S", "-c", source, *paths],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.helper.stdout is not None
        line = self.helper.stdout.readline().decode().strip()
        if line != _READY:
            self.helper.kill()
            _, errors = self.helper.communicate()
            raise OSError(f"could not expose the runtime to the sandbox's uid: {errors.decode().strip()[-300:]}")
        atexit.register(self.close)

    def enter(self, uid: int, gid: int) -> list[str]:
        """The command prefix that runs a program in the namespace as `uid`:`gid`, no other groups."""
        return ["nsenter", f"--mount=/proc/{self.helper.pid}/ns/mnt", f"--setuid={uid}", f"--setgid={gid}", "--"]

    def close(self) -> None:
        if self.helper.poll() is None:
            assert self.helper.stdin is not None
            self.helper.stdin.close()
            self.helper.wait()


def _helper() -> None:
    expose(sys.argv[1:])
    print(_READY, flush=True)
    sys.stdin.read()  # until the appliance exits


if __name__ == "__main__":
    _helper()
