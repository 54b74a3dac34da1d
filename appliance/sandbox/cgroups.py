"""A control group per sandboxed run: limits the kernel enforces, and an end for every process.

Rlimits bind one process and leave out what the kernel holds for it (tmpfs pages, memfd, SysV
shared memory), and RLIMIT_NPROC does not bind uid 0. A memory cgroup counts all of those, a pids
cgroup counts every task, and the group lists every process the run started, wherever it moved,
so the parent can end them all and check that none is left (`RunCgroup.end`).

Both layouts are handled: cgroup v2 (one folder with memory and pids enabled) and cgroup v1
(a folder in the memory and in the pids hierarchy). Runs go under the parent's own cgroup, or
under `$APPLIANCE_SANDBOX_CGROUP` (a path inside the hierarchies, as in /proc/self/cgroup): the
way an ordinary user hands the appliance a cgroup delegated to them. A relative path there is
taken under the process's own cgroup in each hierarchy (v1 hierarchies may place it differently).
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

#: a cgroup path (as /proc/self/cgroup writes them) under which runs create their groups
CGROUP_VARIABLE = "APPLIANCE_SANDBOX_CGROUP"
#: how to get one, for the refusal's message
HOW_TO_DELEGATE = (
    f"run as root, or set ${CGROUP_VARIABLE} to a cgroup delegated to this user "
    "(systemd-run --user --scope -p Delegate=yes), or pass --unsafe-code-execution"
)
_CONTROLLERS = ("memory", "pids")
_counter = itertools.count()


@dataclass(frozen=True)
class Layout:
    """Where run groups are made: one folder per hierarchy (v2: one; v1: memory's and pids')."""

    version: int
    parents: tuple[Path, ...]

    def describe(self) -> str:
        """For the run's record: the same on every machine with the same layout (no paths)."""
        return f"cgroup v{self.version} ({', '.join(_CONTROLLERS)})"


def _mounts() -> list[tuple[Path, str, set[str]]]:
    """(mount point, filesystem type, super options) of every cgroup mount."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text(encoding="utf-8").splitlines():
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((Path(fields[4]), tail[0], set(tail[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """This process's cgroup per controller ('' for the v2 hierarchy), from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _inside(mount: Path, own: str, configured: str | None) -> Path:
    """The parent of run groups in one hierarchy: the configured path, or this process's own cgroup."""
    path = own if not configured else configured if configured.startswith("/") else f"{own}/{configured}"
    return mount / path.lstrip("/")


def find_layout() -> Layout | str:
    """Where this process can make run groups, or why it cannot (one line)."""
    configured = os.environ.get(CGROUP_VARIABLE)
    own = _own_paths()
    mounts = _mounts()
    v1 = {c: m for m, kind, options in mounts if kind == "cgroup" for c in _CONTROLLERS if c in options}
    if all(c in v1 for c in _CONTROLLERS):
        parents = tuple(_inside(v1[c], own.get(c, "/"), configured) for c in _CONTROLLERS)
        layout = Layout(1, parents)
    else:
        unified = [m for m, kind, _ in mounts if kind == "cgroup2"]
        if not unified:
            return "no cgroup hierarchy with the memory and pids controllers is mounted"
        parent = _inside(unified[0], own.get("", "/"), configured)
        available = _read(parent / "cgroup.controllers").split()
        missing = [c for c in _CONTROLLERS if c not in available]
        if missing:
            return f"the cgroup {parent} lacks the {' and '.join(missing)} controller"
        layout = Layout(2, (parent,))
    for parent in layout.parents:
        if not parent.is_dir():
            return f"the cgroup {parent} does not exist"
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"cannot create a cgroup under {parent} (permission denied)"
    return layout


@functools.cache
def cgroup_problem() -> str | None:
    """Why run groups cannot be made here, or None; found once by making and removing one."""
    layout = find_layout()
    if isinstance(layout, str):
        return f"{layout}; {HOW_TO_DELEGATE}"
    try:
        probe = RunCgroup.create(layout, memory_bytes=64 << 20, tasks=4)
    except OSError as error:
        return f"cannot make a cgroup under {layout.describe()}: {error.strerror}; {HOW_TO_DELEGATE}"
    probe.end()
    return None


class RunCgroup:
    """One run's group: made with its limits before the child starts, ended when the run returns."""

    def __init__(self, layout: Layout, folders: list[Path]) -> None:
        self.layout = layout
        self.folders = folders

    @classmethod
    def create(cls, layout: Layout, memory_bytes: int, tasks: int) -> RunCgroup:
        name = f"appliance-sandbox-{os.getpid()}-{next(_counter)}"
        group = cls(layout, [])
        try:
            if layout.version == 2:
                _enable_controllers(layout.parents[0])
            for parent in layout.parents:
                folder = parent / name
                folder.mkdir()
                group.folders.append(folder)
            group._limit(memory_bytes, tasks)
        except OSError:
            group.end()
            raise
        return group

    def _limit(self, memory_bytes: int, tasks: int) -> None:
        if self.layout.version == 2:
            (folder,) = self.folders
            _write(folder / "memory.max", memory_bytes)
            _write(folder / "memory.swap.max", 0, optional=True)
            _write(folder / "pids.max", tasks)
            return
        memory, pids = self.folders
        _write(memory / "memory.limit_in_bytes", memory_bytes)
        _write(memory / "memory.memsw.limit_in_bytes", memory_bytes, optional=True)
        _write(pids / "pids.max", tasks)

    def add(self, pid: int) -> None:
        """Move `pid` into the group (in every hierarchy)."""
        for folder in self.folders:
            _write(folder / "cgroup.procs", pid)

    def pids(self) -> set[int]:
        alive: set[int] = set()
        for folder in self.folders:
            alive |= {int(p) for p in _read(folder / "cgroup.procs").split()}
        return alive

    def memory_killed(self) -> bool:
        """Whether the kernel killed a process of the group for going over its memory."""
        folder = self.folders[0]
        events = _read(folder / ("memory.events" if self.layout.version == 2 else "memory.oom_control"))
        counts = dict(line.split() for line in events.splitlines() if len(line.split()) == 2)
        return int(counts.get("oom_kill", "0")) > 0

    def end(self, timeout_s: float = 5.0) -> int:
        """Kill every process of the group, wait until none is left, remove it; returns how many
        were still alive. Raises if one survives, which would be a sandbox failure, not a result."""
        survivors = self.pids() if self.folders else set()
        deadline = time.monotonic() + timeout_s
        while self.folders and self.pids():
            if self.layout.version == 2 and (self.folders[0] / "cgroup.kill").exists():
                _write(self.folders[0] / "cgroup.kill", 1)
            else:
                for pid in self.pids():
                    self._kill(pid)
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {sorted(self.pids())} outlived the sandbox's cgroup")
            time.sleep(0.001)
        for folder in reversed(self.folders):
            for _ in range(200):  # the kernel may still be tearing the last task down
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)
        self.folders = []
        return len(survivors)

    def _kill(self, pid: int) -> None:
        """SIGKILL `pid` through a pidfd, once it is known to be still ours (no recycled pid)."""
        try:
            handle = os.pidfd_open(pid)
        except (ProcessLookupError, OSError):
            return
        try:
            mine = any(str(f.name) in _read(Path(f"/proc/{pid}/cgroup")) for f in self.folders)
            if mine:
                signal.pidfd_send_signal(handle, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass
        finally:
            os.close(handle)


def _enable_controllers(parent: Path) -> None:
    enabled = _read(parent / "cgroup.subtree_control").split()
    missing = [f"+{c}" for c in _CONTROLLERS if c not in enabled]
    if missing:
        _write(parent / "cgroup.subtree_control", " ".join(missing))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def _write(path: Path, value: object, optional: bool = False) -> None:
    if optional and not path.exists():
        return
    descriptor = os.open(path, os.O_WRONLY)
    try:
        os.write(descriptor, str(value).encode())
    finally:
        os.close(descriptor)
