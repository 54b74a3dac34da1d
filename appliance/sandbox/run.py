"""Running model-written code against test cases: the child computes, the parent judges.

The child (harness.py, run as `python -I -S -c`) starts under bubblewrap (isolation.py) in a
cgroup of its own (cgroups.py) unless the run asked for unsafe execution; its stdout and stderr go
to files the parent opened, its results to a third file, each capped by RLIMIT_FSIZE. The parent
kills it at the wall-clock limit, ends every process of its cgroup, reaps the sandbox's pid 1
where it became the parent's child (an appliance that is a subreaper, or a container's pid 1),
reads the results through the descriptor it kept, decodes them and compares them with the
expected values, which never left the parent (cases.py). A child that stops, floods or crashes
before its results are written scores 0; nothing the child writes can make the parent fail.

The isolation record is the parent's own keys (what it set up and asked for), beside what the
harness claims it set up, under keys starting "claimed": the claim comes through a pipe the harness
closes before the candidate's code runs, and it can never overwrite what the parent knows.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from appliance.sandbox.cases import TestCase, judge_case
from appliance.sandbox.cgroups import Layout, RunCgroup, find_layout
from appliance.sandbox.isolation import (
    HARNESS,
    WORK_FOLDER,
    SandboxUnavailable,
    bwrap_command,
    bwrap_executable,
    describe_kernel_isolation,
    device_nodes,
    kernel_isolation_problem,
    launch,
    runtime_interpreter,
)
from appliance.sandbox.limits import SandboxLimits
from appliance.sandbox.seccomp import filter_program

Status = Literal["passed", "failed", "not_loaded", "timeout", "killed", "no_code"]
#: how the child is isolated: by the kernel (bubblewrap), or only by itself (the user's explicit choice)
Isolation = Literal["kernel", "unsafe"]
UNSAFE = "none: --unsafe-code-execution (the child's own seccomp filter, limits and audit hook only)"


@dataclass(frozen=True)
class TestRun:
    __test__ = False  # not a pytest class

    status: Status
    passed: int
    total: int
    #: why tests failed or the child died (first lines of errors, truncated)
    detail: str
    wall_s: float
    #: what isolation took effect: the kernel's, and what the child set up itself
    isolation: dict[str, str] = field(default_factory=dict)

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def run_tests(
    code: str,
    cases: Sequence[TestCase],
    limits: SandboxLimits,
    isolation: Isolation = "kernel",
    *,
    audit_hook: bool = True,
    seccomp: bool = True,
) -> TestRun:
    """Run `cases` against `code` in a child. `audit_hook` and `seccomp` are always on in runs; the
    tests turn them off to show that the layers below hold on their own."""
    if not code.strip():
        return TestRun("no_code", 0, len(cases), "no code to run", 0.0)
    inner = [runtime_interpreter(), "-I", "-S", "-c", HARNESS.read_text(encoding="utf-8")]
    payload: dict[str, Any] = {
        "code": code,
        "calls": [case.call for case in cases],
        # outside a user namespace RLIMIT_NPROC would count every process of the user
        "limits": limits.model_dump() | ({"tasks": None} if isolation == "unsafe" else {}),
        "seccomp": filter_program().hex() if seccomp else None,
        "audit_hook": audit_hook,
        # bubblewrap's /dev holds these, bound usable for the harness to seal; unsafe: the host's own
        "devices": [] if isolation == "unsafe" else device_nodes(),
    }
    requested = f"seccomp filter {'on' if seccomp else 'off'}, audit hook {'on' if audit_hook else 'off'}"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="appliance-sandbox-") as folder, contextlib.ExitStack() as files:
        root = Path(folder)
        work = root / "work"
        work.mkdir()
        # the parent keeps these descriptors and reads through them: the child cannot take them away
        stdout, stderr, results = (files.enter_context((root / name).open("w+b")) for name in _OUTPUTS)
        claims = files.enter_context(_Claims())
        outputs = _Outputs(stdout, stderr, results, claims)
        if isolation == "unsafe":
            payload["root"] = str(work)  # where the child may write
            kernel, seen = UNSAFE, _supervise(inner, payload, outputs, limits, work=work)
        else:
            payload["root"] = WORK_FOLDER
            kernel, seen = _supervise_isolated(inner, payload, outputs, limits)
        wall = time.perf_counter() - started
        flooded = any(os.fstat(f.fileno()).st_size >= limits.output_kb * 1024 for f in (stdout, stderr, results))
        lines = _tail(results).splitlines()
        error_tail = _tail(stderr)
        record = {"kernel": kernel, "requested": requested} | _claimed_isolation(claims.read())
    return _verdict(cases, lines, record, seen, flooded, error_tail, wall, limits)


class _Claims:
    """The pipe the harness writes its isolation claim to, and closes, before the candidate's code runs."""

    LIMIT = 4096

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()
        os.set_inheritable(self.write_end, False)  # passed to the child by number only (pass_fds)
        #: the number the child inherits it under (the parent's own is closed once the child started)
        self.write_end_in_child = self.write_end

    def __enter__(self) -> _Claims:
        return self

    def read(self) -> str:
        """What the harness wrote (the child has ended: its end of the pipe is closed), at most LIMIT bytes."""
        self.close_write_end()
        os.set_blocking(self.read_end, False)
        chunks: list[bytes] = []
        with contextlib.suppress(BlockingIOError):
            while sum(map(len, chunks)) < self.LIMIT and (chunk := os.read(self.read_end, self.LIMIT)):
                chunks.append(chunk)
        return b"".join(chunks)[: self.LIMIT].decode("utf-8", errors="replace")

    def close_write_end(self) -> None:
        """Once the child holds its copy: nothing but the child can then write to the pipe."""
        if self.write_end >= 0:
            os.close(self.write_end)
            self.write_end = -1

    def __exit__(self, *exc: object) -> None:
        self.close_write_end()
        os.close(self.read_end)


@dataclass(frozen=True)
class _Outputs:
    """Where the child's stdout, stderr, results and isolation claim go (the parent's descriptors)."""

    stdout: IO[bytes]
    stderr: IO[bytes]
    results: IO[bytes]
    claims: _Claims


_OUTPUTS = ("stdout", "stderr", "results")
#: what the child (inner bubblewrap, or the harness itself) may take beyond its own address space
_CGROUP_SLACK_MB = 16


@dataclass(frozen=True)
class _Seen:
    """How the child ended, as the parent saw it."""

    timed_out: bool
    returncode: int | None
    memory_killed: bool = False


def _supervise_isolated(
    inner: list[str], payload: dict[str, Any], outputs: _Outputs, limits: SandboxLimits
) -> tuple[str, _Seen]:
    """The child under bubblewrap, held before it runs until it is in its own cgroup; when it
    returns, every process of that cgroup is ended."""
    problem = kernel_isolation_problem()
    bwrap = bwrap_executable()
    layout = find_layout()
    if problem is not None or bwrap is None or not isinstance(layout, Layout):
        raise SandboxUnavailable(problem or str(layout) or "bubblewrap is missing")
    memory = (limits.memory_mb + limits.disk_mb + _CGROUP_SLACK_MB) << 20
    group = RunCgroup.create(layout, memory_bytes=memory, tasks=limits.tasks)
    info_read, info_write = os.pipe()
    still_open = [info_read, info_write]
    sandbox_pid1: list[int] = []  # a pidfd of the sandbox's pid 1, once bubblewrap names it

    def close(descriptor: int) -> None:
        # once only: a number closed twice may by then be another thread's file (DuckDB's, say)
        if descriptor in still_open:
            still_open.remove(descriptor)
            os.close(descriptor)

    try:
        command, options = launch(bwrap_command(bwrap, limits.disk_mb, inner, info_write))

        def into_cgroup(child: subprocess.Popen[bytes]) -> None:
            # The child boots the interpreter meanwhile: trusted code, which runs nothing of the
            # candidate's before its payload, and the payload is sent only once it is in the group.
            close(info_write)
            inside = _child_pid(info_read, limits.wall_s)
            if inside is not None:
                with contextlib.suppress(ProcessLookupError):  # it died setting up: nothing runs outside
                    sandbox_pid1.append(os.pidfd_open(inside))
                    group.add(inside)

        seen = _supervise(
            command, payload, outputs, limits, extra_fds=(info_write,), started=into_cgroup, options=options
        )
    finally:
        for descriptor in list(still_open):
            close(descriptor)
        killed_by_memory = group.memory_killed()
        group.end()
        for pidfd in sandbox_pid1:
            _reap_if_ours(pidfd)
    described = describe_kernel_isolation(bwrap, limits.disk_mb) + f"; {layout.describe()}: {memory >> 20} MB, "
    return described + f"{limits.tasks} tasks", _Seen(seen.timed_out, seen.returncode, killed_by_memory)


def _reap_if_ours(pidfd: int, wait_s: float = 5.0) -> None:
    """Reap the sandbox's pid 1 if it became this process's child, and close its pidfd.

    When bubblewrap dies first (killed at the time limit), its child is handed to the nearest
    subreaper: this process where it is one (a container's pid 1, a supervisor), which must then
    wait for it or keep a zombie. The pidfd names that very process, never a later one with its pid,
    so no other thread's child is ever reaped here."""
    try:
        exited = select.poll()
        exited.register(pidfd, select.POLLIN)
        exited.poll(wait_s * 1000)  # readable once it has exited (the cgroup was just ended)
        with contextlib.suppress(ChildProcessError):  # not ours: bubblewrap or init reaps it
            os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG)
    finally:
        os.close(pidfd)


def _feed_and_wait(child: subprocess.Popen[bytes], data: bytes, wait_s: float) -> bool:
    """Write `data` to the child's stdin and wait for it to exit; False at the time limit. Waits on a
    pidfd, so the parent wakes when the child ends (Popen's own wait polls with growing sleeps)."""
    assert child.stdin is not None
    deadline = time.monotonic() + wait_s
    exited = os.pidfd_open(child.pid)
    stdin = child.stdin.fileno()
    os.set_blocking(stdin, False)
    poller = select.poll()
    poller.register(exited, select.POLLIN)
    poller.register(stdin, select.POLLOUT)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            for descriptor, event in poller.poll(remaining * 1000):
                if descriptor == exited:
                    child.wait()
                    return True
                try:
                    data = data[os.write(stdin, data) :] if not event & (select.POLLERR | select.POLLHUP) else b""
                except (BrokenPipeError, BlockingIOError):
                    data = data if not event & select.POLLERR else b""
                if not data:  # all sent, or the child stopped reading
                    poller.unregister(stdin)
                    child.stdin.close()
    finally:
        os.close(exited)


def _child_pid(info: int, wait_s: float) -> int | None:
    """The pid bubblewrap reports for the child (its JSON on the info descriptor), or None if it died first."""
    text = b""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([info], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(info, 4096) if ready else b""
        if not chunk:
            return None
        text += chunk
        with contextlib.suppress(ValueError):
            pid = json.loads(text).get("child-pid")
            return pid if isinstance(pid, int) else None
    return None


def _supervise(
    command: list[str],
    payload: dict[str, Any],
    outputs: _Outputs,
    limits: SandboxLimits,
    *,
    work: Path | None = None,
    extra_fds: tuple[int, ...] = (),
    started: Callable[[subprocess.Popen[bytes]], None] | None = None,
    options: dict[str, Any] | None = None,
) -> _Seen:
    """Start the child with stdout, stderr and results going to files; the results file is an inherited
    descriptor named in the payload. Kill the child's whole session at the limit."""
    stdout, stderr, results, claims = outputs.stdout, outputs.stderr, outputs.results, outputs.claims
    child = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=stdout,
        stderr=stderr,
        cwd=work or "/",
        env={"PATH": "/usr/bin:/bin", "HOME": str(work or "/"), "TMPDIR": str(work or "/"), "LANG": "C.UTF-8"},
        start_new_session=True,
        pass_fds=(results.fileno(), claims.write_end, *extra_fds),
        **(options or {}),
    )
    claims.close_write_end()
    payload = payload | {"results_fd": results.fileno(), "claims_fd": claims.write_end_in_child}
    try:
        if started is not None:
            started(child)
        timed_out = not _feed_and_wait(child, json.dumps(payload).encode(), limits.wall_s)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        if child.stdin is not None:
            child.stdin.close()
    return _Seen(timed_out, child.returncode)


def _verdict(
    cases: Sequence[TestCase],
    lines: list[str],
    isolation: dict[str, str],
    seen: _Seen,
    flooded: bool,
    error_tail: str,
    wall: float,
    limits: SandboxLimits,
) -> TestRun:
    """The parent's judgement: the last line of the results file holds the child's outcomes."""
    records = [_json_object(line) for line in lines]
    total = len(cases)
    if seen.timed_out:
        return TestRun("timeout", 0, total, f"killed after {limits.wall_s:g} s", wall, isolation)
    report = records[-1] if records else None
    if report is None or "loaded" not in report:
        detail = f"output limit ({limits.output_kb} KB) exceeded" if flooded else _death(seen, error_tail)
        return TestRun("killed", 0, total, detail, wall, isolation)
    if not report.get("loaded"):
        return TestRun("not_loaded", 0, total, _text(report.get("error", ""), 600), wall, isolation)
    outcomes = report.get("cases")
    outcomes = outcomes if isinstance(outcomes, list) and len(outcomes) == total else [None] * total
    verdicts = [_judged(case, outcome) for case, outcome in zip(cases, outcomes, strict=True)]
    passed = sum(ok for ok, _ in verdicts)
    errors = "; ".join(why for ok, why in verdicts if not ok)
    return TestRun("passed" if passed == total else "failed", passed, total, errors[:600], wall, isolation)


def _judged(case: TestCase, outcome: object) -> tuple[bool, str]:
    """`judge_case`, with whatever the child's data makes it raise turned into a failed case."""
    try:
        return judge_case(case, outcome)
    except Exception as error:
        return False, f"{case.call}: the result could not be judged ({type(error).__name__})"


def _claimed_isolation(text: str) -> dict[str, str]:
    """What the harness says it set up, as short strings under keys that say it is a claim."""
    claimed = _json_object(text)
    if claimed is None:
        return {"claimed": "nothing (the harness wrote no claim)"}
    return {f"claimed {_text(k, 40)}": _text(v, 200) for k, v in list(claimed.items())[:16]}


def _text(value: object, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else f"({type(value).__name__})"


def _json_object(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _tail(handle: IO[bytes], size: int = 262_144) -> str:
    end = os.fstat(handle.fileno()).st_size
    return os.pread(handle.fileno(), size, max(0, end - size)).decode("utf-8", errors="replace")


def _death(seen: _Seen, stderr: str) -> str:
    """Why the child ended without results; bubblewrap reports a child killed by signal N as 128 + N."""
    if seen.memory_killed:
        return "child killed by the kernel at its cgroup's memory limit"
    returncode = seen.returncode
    number = -returncode if returncode is not None and returncode < 0 else (returncode or 0) - 128
    if number > 0 and number in signal.valid_signals():
        name = signal.Signals(number).name
        reasons = {"SIGXCPU": "CPU time limit", "SIGXFSZ": "output limit", "SIGKILL": "killed"}
        return f"child died by {name} ({reasons.get(name, 'signal')})"
    last = stderr.strip().splitlines()[-1:] or [""]
    return f"child exited with {returncode} without a report {last[0][:200]}".strip()
