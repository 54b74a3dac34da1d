"""Running model-written code against test cases: the child computes, the parent judges.

The child (harness.py, run as `python -I -S -c`) starts under bubblewrap (isolation.py) unless
the run asked for unsafe execution; its stdout and stderr go to files the parent opened, its
results to a third file, each capped by RLIMIT_FSIZE. The parent kills it at the wall-clock limit,
then decodes the results and compares them with the expected values, which never left the parent
(cases.py). A child that stops, floods or crashes before its results are written scores 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from appliance.sandbox.cases import TestCase, judge_case
from appliance.sandbox.isolation import (
    WORK_FOLDER,
    SandboxUnavailable,
    bwrap_command,
    bwrap_executable,
    describe_kernel_isolation,
    kernel_isolation_problem,
    runtime_interpreter,
)
from appliance.sandbox.limits import SandboxLimits
from appliance.sandbox.seccomp import filter_program

HARNESS = Path(__file__).with_name("harness.py")
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
    command, kernel = _command(limits, isolation)
    payload = {
        "code": code,
        "calls": [case.call for case in cases],
        # outside a user namespace RLIMIT_NPROC would count every process of the user
        "limits": limits.model_dump() | ({"tasks": None} if isolation == "unsafe" else {}),
        "seccomp": filter_program().hex() if seccomp else None,
        "audit_hook": audit_hook,
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="appliance-sandbox-") as folder:
        root = Path(folder)
        work = root / "work"
        work.mkdir()
        payload["root"] = WORK_FOLDER if isolation == "kernel" else str(work)  # where the child may write
        stdout, stderr, results = (root / "stdout", root / "stderr", root / "results")
        timed_out, returncode = _supervise(command, payload, (stdout, stderr, results), work, limits.wall_s)
        wall = time.perf_counter() - started
        flooded = any(path.stat().st_size >= limits.output_kb * 1024 for path in (stdout, stderr, results))
        lines = _tail(results).splitlines()
        error_tail = _tail(stderr)
    return _verdict(cases, lines, kernel, timed_out, flooded, returncode, error_tail, wall, limits)


def _command(limits: SandboxLimits, isolation: Isolation) -> tuple[list[str], str]:
    inner = [runtime_interpreter(), "-I", "-S", "-c", HARNESS.read_text(encoding="utf-8")]
    if isolation == "unsafe":
        return inner, UNSAFE
    problem = kernel_isolation_problem()
    bwrap = bwrap_executable()
    if problem is not None or bwrap is None:
        raise SandboxUnavailable(problem or "bubblewrap is missing")
    return bwrap_command(bwrap, limits.disk_mb, inner), describe_kernel_isolation(bwrap, limits.disk_mb)


def _supervise(
    command: list[str], payload: dict[str, Any], outputs: tuple[Path, Path, Path], work: Path, wall_s: float
) -> tuple[bool, int | None]:
    """Start the child with stdout, stderr and results going to files; the results file is an inherited
    descriptor named in the payload. Kill the child's whole session at the limit (under bubblewrap its
    PID namespace dies with it)."""
    with contextlib.ExitStack() as files:
        stdout, stderr, results = (files.enter_context(path.open("wb")) for path in outputs)
        child = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=stderr,
            cwd=work,
            env={"PATH": "/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8"},
            start_new_session=True,
            pass_fds=(results.fileno(),),
        )
        payload = payload | {"results_fd": results.fileno()}
        timed_out = False
        try:
            child.communicate(json.dumps(payload).encode(), timeout=wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    return timed_out, child.returncode


def _verdict(
    cases: Sequence[TestCase],
    lines: list[str],
    kernel: str,
    timed_out: bool,
    flooded: bool,
    returncode: int | None,
    error_tail: str,
    wall: float,
    limits: SandboxLimits,
) -> TestRun:
    """The parent's judgement: the child's first line says what isolation it set up, the last its outcomes."""
    records = [_json_object(line) for line in lines]
    isolation = {"kernel": kernel}
    if records and records[0] is not None:
        isolation |= {str(k): str(v) for k, v in dict(records[0].get("isolation") or {}).items()}
    total = len(cases)
    if timed_out:
        return TestRun("timeout", 0, total, f"killed after {limits.wall_s:g} s", wall, isolation)
    report = records[-1] if len(records) >= 2 else None
    if report is None or "loaded" not in report:
        detail = f"output limit ({limits.output_kb} KB) exceeded" if flooded else _death(returncode, error_tail)
        return TestRun("killed", 0, total, detail, wall, isolation)
    if not report.get("loaded"):
        return TestRun("not_loaded", 0, total, str(report.get("error", ""))[:600], wall, isolation)
    outcomes = report.get("cases")
    outcomes = outcomes if isinstance(outcomes, list) and len(outcomes) == total else [None] * total
    verdicts = [judge_case(case, outcome) for case, outcome in zip(cases, outcomes, strict=True)]
    passed = sum(ok for ok, _ in verdicts)
    errors = "; ".join(why for ok, why in verdicts if not ok)
    return TestRun("passed" if passed == total else "failed", passed, total, errors[:600], wall, isolation)


def _json_object(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _tail(path: Path, size: int = 262_144) -> str:
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - size))
        return handle.read().decode("utf-8", errors="replace")


def _death(returncode: int | None, stderr: str) -> str:
    """Why the child ended without results; bubblewrap reports a child killed by signal N as 128 + N."""
    number = -returncode if returncode is not None and returncode < 0 else (returncode or 0) - 128
    if number > 0 and number in signal.valid_signals():
        name = signal.Signals(number).name
        reasons = {"SIGXCPU": "CPU time limit", "SIGXFSZ": "output limit", "SIGKILL": "killed"}
        return f"child died by {name} ({reasons.get(name, 'signal')})"
    last = stderr.strip().splitlines()[-1:] or [""]
    return f"child exited with {returncode} without a report {last[0][:200]}".strip()
