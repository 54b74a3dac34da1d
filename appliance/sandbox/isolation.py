"""Kernel isolation for the child: bubblewrap's namespaces around a read-only Python runtime.

The child runs as an unprivileged host uid whoever starts the appliance: an ordinary user's own,
or, under root, `$APPLIANCE_SANDBOX_UID` (default 1999999999, a uid no account has), so sysctls,
core_pattern, device nodes and other users' processes are out of reach by the kernel's own
checks. It gets new user, PID, network, IPC, UTS and cgroup namespaces (no further user
namespaces inside), no capabilities, its own session, and a mount namespace holding only the
runtime (read-only), a fresh /proc, a /dev of its own and a small tmpfs as its work folder; the
rest of the tree, /dev included, is read-only. The child is the namespace's pid 1 (`--as-pid-1`):
there is no bubblewrap reaper inside running without the child's seccomp filter. Its memory and
tasks are bound by a cgroup (cgroups.py).

/dev holds the host's null, zero, full, random, urandom and tty nodes and no devpts, so the child
has no pseudo-terminal: the pty budget a host's devpts instances share is out of its reach.
bubblewrap cannot bind a node read-only and usable at once (its read-only remount adds nodev), so
the nodes are bound usable and the harness, holding CAP_SYS_ADMIN inside its user namespace alone
for that, remounts them read-only without nodev and drops every capability before anything else
(harness.py). A read-only mount refuses a change of the node's times, which write permission on
a host node would otherwise allow. Where any of this cannot be had, `kernel_isolation_problem` says
why, and code is not run unless the user asked for unsafe execution explicitly.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from appliance.sandbox.cgroups import cgroup_problem
from appliance.sandbox.exposure import ExposedRuntime, hidden_ancestors

#: names the bubblewrap executable, for machines where it is not on PATH
BWRAP_VARIABLE = "APPLIANCE_BWRAP"
#: the host uid (and gid) the child runs as when the appliance runs as root
SANDBOX_UID_VARIABLE = "APPLIANCE_SANDBOX_UID"
DEFAULT_SANDBOX_UID = 1_999_999_999
WORK_FOLDER = "/work"
#: the child's side (run with -c, never imported) and its flag for sealing the device nodes alone
HARNESS = Path(__file__).with_name("harness.py")
SEAL_ONLY = "--seal-only"
#: the fix `kernel_isolation_problem`'s messages end with
HOW_TO_FIX = "install bubblewrap (apt-get install bubblewrap) on a kernel that allows user namespaces"
#: the host's device nodes bound into the child's /dev: usable, and remounted read-only by the harness
#: (`DEVICE_NODES` in its payload) so that nothing of them (mode, owner, times, attributes) changes
DEVICE_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")


def device_nodes() -> list[str]:
    """The device nodes of `DEVICE_NODES` this host has (a container may lack /dev/tty)."""
    return [node for node in DEVICE_NODES if os.path.exists(node)]


#: the links a program expects beside them (what bubblewrap's --dev would make, without its devpts)
_DEVICE_LINKS = (
    ("/proc/self/fd", "/dev/fd"),
    *((f"/proc/self/fd/{n}", f"/dev/{s}") for n, s in enumerate(("stdin", "stdout", "stderr"))),
)
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


def sandbox_uid() -> int:
    """The unprivileged host uid of the child: this process's own, or the configured one under root."""
    if os.geteuid() != 0:
        return os.geteuid()
    uid = int(os.environ.get(SANDBOX_UID_VARIABLE, DEFAULT_SANDBOX_UID))
    if uid == 0:
        raise SandboxUnavailable(f"${SANDBOX_UID_VARIABLE} must not be 0: the child never runs as host root")
    return uid


def _runtime_folders() -> list[str]:
    return sorted({os.path.realpath(sys.base_prefix), os.path.dirname(runtime_interpreter())})


_exposure_lock = threading.Lock()


@functools.cache
def _exposed_runtime() -> ExposedRuntime:
    return ExposedRuntime(_runtime_folders())


def _exposed() -> ExposedRuntime:
    with _exposure_lock:  # one helper, however many threads play code review at once
        return _exposed_runtime()


def launch(command: list[str]) -> tuple[list[str], dict[str, Any]]:
    """`command` (bubblewrap's) as this process starts it, with the Popen arguments that drop root:
    under root, as the sandbox uid with no other groups, from the runtime's exposed namespace where
    the uid could not reach the runtime otherwise."""
    if os.geteuid() != 0:
        return command, {}
    uid = sandbox_uid()
    if hidden_ancestors(_runtime_folders()):
        return _exposed().enter(uid, uid) + command, {}
    return command, {"user": uid, "group": uid, "extra_groups": []}


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


def bwrap_command(bwrap: str, disk_mb: int, inner: list[str], info_fd: int | None = None) -> list[str]:
    """`inner` run under bubblewrap with the namespaces and mounts described above; bubblewrap writes
    the child's pid (as JSON) to `info_fd`, so that the parent can put it into its cgroup."""
    fds = ["--info-fd", str(info_fd)] if info_fd is not None else []
    return [
        bwrap,
        # fresh namespaces, no new ones inside, nobody's ids, no capabilities, gone with its parent
        *("--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"),
        *("--unshare-cgroup-try", "--disable-userns", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL"),
        # inside its namespace only, until the harness has sealed the device nodes and dropped it
        *("--cap-add", "CAP_SYS_ADMIN"),
        *("--die-with-parent", "--new-session", "--as-pid-1"),
        # an environment of three variables
        *("--clearenv", "--setenv", "HOME", WORK_FOLDER, "--setenv", "TMPDIR", WORK_FOLDER),
        *("--setenv", "LANG", "C.UTF-8", "--hostname", "sandbox"),
        *_runtime_mounts(),
        "--proc",
        "/proc",
        *("--size", "65536", "--tmpfs", "/dev"),
        *[argument for node in device_nodes() for argument in ("--dev-bind", node, node)],
        *[argument for target, link in _DEVICE_LINKS for argument in ("--symlink", target, link)],
        "--size",
        str(disk_mb * 1024 * 1024),
        "--tmpfs",
        WORK_FOLDER,
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        WORK_FOLDER,
        *fds,
        "--",
        *inner,
    ]


@functools.cache
def _probe(bwrap: str) -> str | None:
    """Why bubblewrap cannot start the harness's first step here (seal the device nodes, drop the
    capabilities), or None when it can."""
    harness = HARNESS.read_text(encoding="utf-8")
    inner = [runtime_interpreter(), "-I", "-S", "-c", harness, SEAL_ONLY, *device_nodes()]
    try:
        command, options = launch(bwrap_command(bwrap, 1, inner))
        result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False, **options)
    except (OSError, subprocess.SubprocessError, SandboxUnavailable) as error:
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
    if problem is not None:
        return f"{problem}; {HOW_TO_FIX}"
    return cgroup_problem()


@functools.cache
def bwrap_version(bwrap: str) -> str:
    result = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False)
    return result.stdout.strip() or "bubblewrap"


def describe_kernel_isolation(bwrap: str, disk_mb: int) -> str:
    return (
        f"{bwrap_version(bwrap)} as host uid {sandbox_uid()}: user, pid, net, ipc, uts namespaces, "
        f"no capabilities, the child as pid 1; read-only runtime and root, private {WORK_FOLDER} ({disk_mb} MB), "
        "read-only device nodes, no devpts"
    )
