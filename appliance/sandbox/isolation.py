"""Kernel isolation for the child: bubblewrap's namespaces around a read-only Python runtime.

The child gets new user, PID, network, IPC, UTS and cgroup namespaces (no further user namespaces
inside), all capabilities dropped, its own session, and a mount namespace holding only the
runtime (the interpreter's prefix and the system's shared libraries, read-only), a fresh /proc
and /dev, and a small tmpfs as its work folder: no home, no project, no /etc, no /tmp of the
host. It dies with the parent, and with it every process of its PID namespace. Where bubblewrap
is missing or the kernel refuses the namespaces, `kernel_isolation_problem` says why, and code is
not run unless the user asked for unsafe execution explicitly.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys

#: names the bubblewrap executable, for machines where it is not on PATH
BWRAP_VARIABLE = "APPLIANCE_BWRAP"
WORK_FOLDER = "/work"
#: the fix `kernel_isolation_problem`'s messages end with
HOW_TO_FIX = "install bubblewrap (apt-get install bubblewrap) on a kernel that allows user namespaces"
_LIBRARY_FOLDERS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/lib32")


class SandboxUnavailable(RuntimeError):
    """Kernel isolation was asked for and cannot be had."""


def bwrap_executable() -> str | None:
    configured = os.environ.get(BWRAP_VARIABLE)
    if configured is not None:
        return configured if os.access(configured, os.X_OK) else None
    return shutil.which("bwrap")


def runtime_interpreter() -> str:
    """The real interpreter behind this one (a virtual environment's python is a link to it)."""
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def _runtime_mounts() -> list[str]:
    """Read-only binds of the interpreter's prefix and the shared libraries it links against."""
    arguments: list[str] = []
    bound: set[str] = set()
    for folder in _LIBRARY_FOLDERS:
        if os.path.islink(folder):  # merged /usr: /lib -> usr/lib
            arguments += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            arguments += ["--ro-bind", folder, folder]
            bound.add(folder)
    prefix = os.path.realpath(sys.base_prefix)
    interpreter = runtime_interpreter()
    for path in (prefix, os.path.dirname(interpreter)):
        if not any(path == b or path.startswith(b + os.sep) for b in bound):
            arguments += ["--ro-bind", path, path]
            bound.add(path)
    return arguments


def bwrap_command(bwrap: str, disk_mb: int, inner: list[str]) -> list[str]:
    """`inner` run under bubblewrap with the namespaces and mounts described above."""
    return [
        bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--disable-userns",
        "--uid",
        "65534",
        "--gid",
        "65534",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--setenv",
        "HOME",
        WORK_FOLDER,
        "--setenv",
        "TMPDIR",
        WORK_FOLDER,
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--hostname",
        "sandbox",
        *_runtime_mounts(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(disk_mb * 1024 * 1024),
        "--tmpfs",
        WORK_FOLDER,
        "--chdir",
        WORK_FOLDER,
        "--",
        *inner,
    ]


@functools.cache
def _probe(bwrap: str) -> str | None:
    command = bwrap_command(bwrap, 1, [runtime_interpreter(), "-I", "-S", "-c", "pass"])
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as error:
        return f"bubblewrap ({bwrap}) could not start: {error}"
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        return f"bubblewrap ({bwrap}) cannot isolate here: {reason}"
    return None


def kernel_isolation_problem() -> str | None:
    """Why the child cannot be isolated by the kernel on this machine, or None when it can."""
    bwrap = bwrap_executable()
    if bwrap is None:
        where = os.environ.get(BWRAP_VARIABLE)
        missing = f"${BWRAP_VARIABLE} ({where}) is not an executable" if where else "bubblewrap (bwrap) is missing"
        return f"{missing}; {HOW_TO_FIX}"
    problem = _probe(bwrap)
    return None if problem is None else f"{problem}; {HOW_TO_FIX}"


@functools.cache
def bwrap_version(bwrap: str) -> str:
    result = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False)
    return result.stdout.strip() or "bubblewrap"


def describe_kernel_isolation(bwrap: str, disk_mb: int) -> str:
    return (
        f"{bwrap_version(bwrap)}: user, pid, net, ipc, uts namespaces, no capabilities; "
        f"read-only runtime, private {WORK_FOLDER} ({disk_mb} MB)"
    )
