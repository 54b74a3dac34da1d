"""The sandbox against the host: each route by which model-written code once reached host root,
outlived its run, escaped its limits or crashed the parent, asserted twice: with the appliance as
root (as CI and many lab containers run it) and as an ordinary user (a uid with no account, made
by this test: its cgroup delegated by root, the runtime exposed in a mount namespace of its own).

Each case asserts what the host shows, not only the score: the sysctls' values, /dev/null's mode,
owner, times and extended attributes, and that no process of a run's cgroup is alive afterwards.
The cases run with the weakest layers that matter: namespaces only (no seccomp filter, no audit
hook) where the kernel's uid checks, mounts and cgroup must hold alone, kernel only (the filter,
no hook) where the filter is part of the answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from appliance.sandbox.cases import TestCase
from appliance.sandbox.cgroups import CGROUP_VARIABLE, Layout, find_layout
from appliance.sandbox.isolation import kernel_isolation_problem
from appliance.sandbox.limits import SandboxLimits
from appliance.sandbox.run import TestRun, run_tests

REPO = Path(__file__).resolve().parent.parent
LIMITS = SandboxLimits(wall_s=4.0, cpu_s=2, test_s=1.0, memory_mb=256, output_kb=64, disk_mb=4)
#: the uid this test makes an ordinary user of (no account has it)
ORDINARY_UID = 1_999_998_000
#: global sysctls only host root may write (kernel/pid_max, say, is per pid namespace on new kernels)
SYSCTLS = ("kernel/core_pattern", "vm/swappiness", "vm/overcommit_ratio")
ADD = [TestCase(call="add(1, 2)", expect="3"), TestCase(call="add(-1, 1)", expect="0")]
WHO = ["root", "ordinary user"]
NAMESPACES, KERNEL = "namespaces-only", "kernel-only"


@dataclass(frozen=True)
class HostCase:
    code: str
    layers: str
    check: Callable[[TestRun], None]
    cases: tuple[TestCase, ...] = tuple(ADD)


def returns_the_contained_value(result: TestRun) -> None:
    """The candidate's claim is the contained outcome (the host's own checks back it up)."""
    assert (result.status, result.passed) == ("passed", 1), result.detail


def killed_by_memory(result: TestRun) -> None:
    assert result.status == "killed" and "memory limit" in result.detail, result.detail


def scores_nothing_and_is_judged(result: TestRun) -> None:
    assert result.passed == 0 and result.status in ("failed", "killed"), result
    assert result.detail, "a failed case says why"


def scores_honestly(result: TestRun) -> None:
    assert (result.status, result.passed) == ("passed", 2), result.detail


def isolation_is_the_parents(result: TestRun) -> None:
    """What the parent set up stands as it set it; the harness's claim stands apart, and unforged."""
    assert "FORGED" not in json.dumps(result.isolation), result.isolation
    assert result.isolation["kernel"].startswith("bubblewrap") and result.isolation["requested"].startswith("seccomp")
    assert result.isolation["claimed no_new_privs"] == "set" and result.isolation["claimed capabilities"] == "none"


def scores_honestly_with_the_parents_record(result: TestRun) -> None:
    scores_honestly(result)
    isolation_is_the_parents(result)


def _case(code: str, layers: str, expected: str) -> HostCase:
    return HostCase(code, layers, returns_the_contained_value, (TestCase(call="add(1, 2)", expect=expected),))


HOST: dict[str, HostCase] = {
    "sysctls (core_pattern among them)": _case(
        f"""
def add(a, b):
    out = []
    for name in {SYSCTLS!r}:
        path = '/proc/sys/' + name
        try:
            value = open(path).read()
            with open(path, 'w') as sysctl:
                sysctl.write(value)  # the value it had: a failed containment changes nothing
            out.append('written')
        except OSError:
            out.append('refused')
    return out
""",
        NAMESPACES,
        repr(["refused"] * len(SYSCTLS)),
    ),
    "device nodes": _case(
        """
import os
def add(a, b):
    out = []
    changes = (
        lambda: os.chmod('/dev/null', 0o666),
        lambda: os.utime('/dev/null'),
        lambda: os.chown('/dev/null', 65534, 65534),
        lambda: os.setxattr('/dev/null', 'user.appliance', b'x'),
    )
    for change in changes:
        try:
            change()
            out.append('changed')
        except OSError:
            out.append('refused')
    return out
""",
        NAMESPACES,
        repr(["refused"] * 4),
    ),
    "pid 1 is the filtered child": _case(
        """
import os
def add(a, b):
    status = dict(line.split(':', 1) for line in open('/proc/1/status').read().splitlines() if ':' in line)
    pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
    return (os.getpid(), status['Seccomp'].strip(), status['NoNewPrivs'].strip(), pids)
""",
        KERNEL,
        "(1, '2', '1', [1])",
    ),
    "a forked survivor": HostCase(
        """
import ctypes, os, signal, time
def add(a, b):
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # no parent-death signal
        os.setsid()
        for name in ('SIGTERM', 'SIGHUP', 'SIGINT'):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        time.sleep(60)
        os._exit(0)
    return a + b
""",
        NAMESPACES,
        scores_honestly,
    ),
    "tasks": _case(
        """
import threading
def add(a, b):
    threading.stack_size(64 * 1024)
    stop, started = threading.Event(), 0
    try:
        while started < 300:
            threading.Thread(target=stop.wait, daemon=True).start()
            started += 1
    except RuntimeError:
        pass
    stop.set()
    return started < 16
""",
        KERNEL,
        "True",
    ),
    "shared memory past the address-space limit": HostCase(
        """
import ctypes
def add(a, b):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    size = 64 * 1024 * 1024
    for _ in range(16):  # 1 GiB in segments that outlive their mapping
        segment = libc.shmget(0, size, 0o1600)
        address = libc.shmat(segment, None, 0)
        ctypes.memset(address, 1, size)
        libc.shmdt(ctypes.c_void_p(address))
    return a + b
""",
        KERNEL,
        killed_by_memory,
    ),
    "read-only root, /dev and /dev/shm": _case(
        """
def add(a, b):
    out = []
    for path in ('/x', '/dev/x', '/dev/shm/x'):
        try:
            open(path, 'w').write('x')
            out.append('written')
        except OSError:
            out.append('refused')
    return out
""",
        NAMESPACES,
        repr(["refused"] * 3),
    ),
    "per-user kernel objects": _case(
        """
import ctypes
def add(a, b):
    libc = ctypes.CDLL(None, use_errno=True)
    timer = ctypes.c_void_p()
    calls = (
        lambda: libc.inotify_init1(0),
        lambda: libc.fanotify_init(0, 0),
        lambda: libc.timer_create(1, None, ctypes.byref(timer)),
        lambda: libc.mq_open(b'/appliance', 0o100, 0o600, None),
    )
    return [(call(), ctypes.get_errno()) for call in calls]
""",
        KERNEL,
        repr([(-1, 1)] * 4),
    ),
    "a claimed value 450 deep": HostCase(
        """
import json, os
def add(a, b):
    value = {'int': '3'}
    for _ in range(450):
        value = {'list': [value]}
    fds = os.listdir('/proc/self/fd')
    results = [int(f) for f in fds if os.path.realpath(f'/proc/self/fd/{f}').endswith('/results')]
    case = json.dumps({'value': value})
    os.write(results[0], ('{"loaded": true, "error": "", "cases": [' + case + ', ' + case + ']}\\n').encode())
    os._exit(0)
""",
        KERNEL,
        scores_nothing_and_is_judged,
    ),
    "a forged isolation record": HostCase(
        """
import json, os
def add(a, b):
    forged = json.dumps({'isolation': {'kernel': 'FORGED: a hardware VM', 'seccomp': 'FORGED'}}) + '\\n'
    for f in os.listdir('/proc/self/fd'):
        if os.path.realpath(f'/proc/self/fd/{f}').endswith('/results'):
            os.pwrite(int(f), forged.encode(), 0)
    return a + b
""",
        NAMESPACES,
        scores_honestly_with_the_parents_record,
    ),
    "pseudo-terminals (a host's shared pty budget)": _case(
        """
import os
def add(a, b):
    opened = []
    for _ in range(3071):
        try:
            opened.append(os.open('/dev/ptmx', os.O_RDONLY))
        except OSError:
            break
    try:
        os.openpty()
        pty = 'opened'
    except OSError:
        pty = 'refused'
    return (len(opened), pty, os.path.exists('/dev/pts'))
""",
        NAMESPACES,
        "(0, 'refused', False)",
    ),
    "device nodes a correct program uses": _case(
        """
import os
def add(a, b):
    with open(os.devnull, 'w') as sink:
        written = sink.write('discarded')
    with open('/dev/urandom', 'rb') as noise, open('/dev/zero', 'rb') as zeros:
        return (written, len(noise.read(16)), zeros.read(4))
""",
        NAMESPACES,
        "(9, 16, b'\\x00\\x00\\x00\\x00')",
    ),
    "the results file made unreadable": HostCase(
        """
import os
for f in os.listdir('/proc/self/fd'):
    if os.path.realpath(f'/proc/self/fd/{f}').endswith('/results'):
        try:
            os.fchmod(int(f), 0)
        except OSError:
            pass  # as root outside the file is not the child's
def add(a, b):
    return a + b
""",
        KERNEL,
        scores_honestly,
    ),
}


def host_state() -> dict[str, Any]:
    null = os.stat("/dev/null")
    return {
        "/dev/null": (null.st_mode, null.st_uid, null.st_gid, null.st_mtime_ns, null.st_ctime_ns),
        "/dev/null xattrs": sorted(os.listxattr("/dev/null")),
        **{name: (Path("/proc/sys") / name).read_text() for name in SYSCTLS},
    }


def run_groups_left(layout: Layout, starts: str) -> list[str]:
    """Run cgroups (by name) still present, and processes still in one of them."""
    left = [str(p) for parent in layout.parents for p in parent.rglob(f"{starts}*")]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if starts in (entry / "cgroup").read_text():
                    left.append(f"process {entry.name}")
            except OSError:
                continue
    return left


def _request() -> dict[str, Any]:
    return {
        "limits": LIMITS.model_dump(),
        "runs": [
            {"code": case.code, "layers": case.layers, "cases": [c.model_dump(exclude_none=True) for c in case.cases]}
            for case in HOST.values()
        ],
    }


@contextmanager
def delegated_cgroups(layout: Layout, name: str) -> Iterator[list[Path]]:
    """A cgroup `name` under each of the layout's parents, handed to the ordinary user (what
    `systemd-run --user -p Delegate=yes` does for a real user), removed with whatever runs left in it."""
    folders = [parent / name for parent in layout.parents]
    for folder in folders:
        folder.mkdir()
        for path in [folder, *(folder / f for f in ("cgroup.procs", "tasks", "cgroup.subtree_control"))]:
            if path.exists():
                os.chown(path, ORDINARY_UID, ORDINARY_UID)
    try:
        yield folders
    finally:
        for folder in folders:
            subprocess.run(["rmdir", *(str(p) for p in folder.iterdir() if p.is_dir()), str(folder)], check=False)


def as_ordinary_user(uid: int, argv: list[str], env: dict[str, str], stdin: str) -> subprocess.CompletedProcess[str]:
    """`argv` run as `uid` (no groups) in a mount namespace where the project and its interpreter
    are reachable (they may sit under root's home), without changing the host's modes."""
    launch = (
        "import os, sys\n"
        "from appliance.sandbox.exposure import expose\n"
        "uid = int(sys.argv[1])\n"
        "expose(sys.argv[2].split(os.pathsep))\n"
        "os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)\n"
        "os.execv(sys.argv[3], sys.argv[3:])\n"
    )
    paths = [str(REPO), sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    command = ["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-c", launch]
    command += [str(uid), os.pathsep.join(paths), *argv]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)


@pytest.fixture(scope="module")
def host_runs() -> Iterator[dict[str, Any]]:
    """Every case as root (in this process) and as an ordinary user, with the host's state before and after."""
    if os.geteuid() != 0:
        pytest.skip("the host cases need root: to run the appliance as root, and to make an ordinary user")
    problem = kernel_isolation_problem()
    assert problem is None, f"the sandbox tests need kernel isolation on this machine: {problem}"
    layout = find_layout()
    assert isinstance(layout, Layout), layout
    before = host_state()
    as_root = {}
    for name, case in HOST.items():
        as_root[name] = run_tests(
            case.code, list(case.cases), LIMITS, audit_hook=False, seccomp=case.layers != NAMESPACES
        )
    delegated = f"appliance-test-user-{os.getpid()}"
    with delegated_cgroups(layout, delegated) as folders:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", CGROUP_VARIABLE: delegated}
        done = as_ordinary_user(
            ORDINARY_UID, [sys.executable, "-m", "tests.sandbox_probe"], env, json.dumps(_request())
        )
        assert done.returncode == 0, done.stderr[-3000:]
        as_user = {name: TestRun(**values) for name, values in zip(HOST, json.loads(done.stdout), strict=True)}
        left = {"root": run_groups_left(layout, f"appliance-sandbox-{os.getpid()}-"), "ordinary user": []}
        left["ordinary user"] = [str(p) for folder in folders for p in folder.iterdir() if p.is_dir()]
    yield {"root": as_root, "ordinary user": as_user, "before": before, "after": host_state(), "left": left}


@pytest.mark.parametrize("who", WHO)
@pytest.mark.parametrize("name", sorted(HOST))
def test_the_case_is_contained(host_runs: dict[str, Any], name: str, who: str) -> None:
    result: TestRun = host_runs[who][name]
    HOST[name].check(result)
    uid = result.isolation["kernel"].split("as host uid ")[1].split(":")[0]
    assert uid == str(ORDINARY_UID if who == "ordinary user" else 1_999_999_999), result.isolation
    assert "cgroup v" in result.isolation["kernel"]


def test_the_host_is_as_it_was(host_runs: dict[str, Any]) -> None:
    assert host_runs["after"] == host_runs["before"]


@pytest.mark.parametrize("who", WHO)
def test_nothing_of_a_run_is_left(host_runs: dict[str, Any], who: str) -> None:
    """No run cgroup, and no process in one, once the runs returned (the forked survivor among them)."""
    assert host_runs["left"][who] == []


def test_a_subreaper_appliance_keeps_no_zombie_of_a_timed_out_run() -> None:
    """As a container's pid 1 (a subreaper), the appliance inherits the sandbox's pid 1 when it kills
    bubblewrap at the time limit; it must reap it, as root and as an ordinary user."""
    if os.geteuid() != 0:
        pytest.skip("needs root: to run the appliance as root, and to make an ordinary user")
    layout = find_layout()
    assert isinstance(layout, Layout), layout
    request = {
        "limits": LIMITS.model_dump(),
        "subreaper": True,
        "runs": [
            {"code": code, "layers": layers, "cases": [c.model_dump(exclude_none=True) for c in ADD]}
            for code in (
                "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                "def add(a, b):\n    time.sleep(60)\n",
                "def add(a, b):\n    return a + b\n",
            )
            for layers in (NAMESPACES, "all-layers")
        ],
    }
    probe = [sys.executable, "-m", "tests.sandbox_probe"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp"}
    as_root = subprocess.run(probe, input=json.dumps(request), capture_output=True, text=True, cwd=REPO, timeout=300)
    delegated = f"appliance-reaper-user-{os.getpid()}"
    with delegated_cgroups(layout, delegated):
        as_user = as_ordinary_user(ORDINARY_UID, probe, env | {CGROUP_VARIABLE: delegated}, json.dumps(request))
    for who, done in (("root", as_root), ("ordinary user", as_user)):
        assert done.returncode == 0, f"{who}: {done.stderr[-3000:]}"
        results = json.loads(done.stdout)
        assert [r["status"] for r in results] == ["timeout", "timeout", "passed", "passed"], (who, results)
        assert [r["zombies"] for r in results] == [[]] * 4, (who, results)
