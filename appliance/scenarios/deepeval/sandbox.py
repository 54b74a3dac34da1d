"""Running untrusted code against tests in a subprocess, never in the appliance's own process.

The child is a fresh, isolated interpreter (`-I -S`) in an empty temporary
folder with a minimal environment and its own session (process group); it
takes a network namespace of its own where the kernel allows, limits its own
memory, CPU time and file size before any untrusted code runs (see
sandbox_harness.py), and the
parent kills its whole process group at the wall-clock limit. Output goes to
a file, so a flood of output hits the file-size limit and kills the child.
Anything that stops the child from reporting is scored as a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from appliance.scenarios.deepeval.settings import SandboxLimits

HARNESS = Path(__file__).with_name("sandbox_harness.py")
Status = Literal["passed", "failed", "not_loaded", "timeout", "killed", "no_code"]


@dataclass(frozen=True)
class TestRun:
    status: Status
    passed: int
    total: int
    #: why tests failed or the child died (first lines of errors, truncated)
    detail: str
    wall_s: float
    #: what OS isolation took effect in the child (see sandbox_harness.isolate); empty if it never said
    isolation: dict[str, str] = field(default_factory=dict)

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def run_tests(code: str, tests: Sequence[str], limits: SandboxLimits) -> TestRun:
    """Run `tests` (Python statements) against `code` in a sandboxed subprocess."""
    if not code.strip():
        return TestRun("no_code", 0, len(tests), "no code to run", 0.0)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="appliance-sandbox-") as folder:
        nonce = secrets.token_hex(16)
        payload = {"nonce": nonce, "code": code, "tests": list(tests), "root": folder, "limits": limits.model_dump()}
        stdout_path, stderr_path = Path(folder, "stdout"), Path(folder, "stderr")
        with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
            child = subprocess.Popen(
                [sys.executable, "-I", "-S", str(HARNESS)],
                stdin=subprocess.PIPE,
                stdout=stdout,
                stderr=stderr,
                cwd=folder,
                env={"PATH": "/usr/bin:/bin", "HOME": folder, "TMPDIR": folder, "LANG": "C.UTF-8"},
                start_new_session=True,
            )
            timed_out = False
            try:
                child.communicate(json.dumps(payload).encode(), timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(child)
        wall = time.perf_counter() - started
        if timed_out:
            return TestRun("timeout", 0, len(tests), f"killed after {limits.wall_s:g} s", wall)
        report = _find_report(_tail(stdout_path), nonce)
        if report is None:
            flooded = stdout_path.stat().st_size >= limits.output_kb * 1024
            detail = (
                f"output limit ({limits.output_kb} KB) exceeded"
                if flooded
                else _death(child.returncode, _tail(stderr_path))
            )
            return TestRun("killed", 0, len(tests), detail, wall)
    isolation = {str(k): str(v) for k, v in dict(report.get("isolation") or {}).items()}
    if not report.get("loaded"):
        return TestRun("not_loaded", 0, len(tests), str(report.get("error", "")), wall, isolation)
    results = report.get("tests", [])
    passed = sum(1 for result in results if result.get("passed") is True)
    errors = [str(result.get("error", "")) for result in results if result.get("passed") is not True]
    status: Status = "passed" if passed == len(tests) else "failed"
    return TestRun(status, passed, len(tests), "; ".join(errors)[:600], wall, isolation)


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    """Kill the child and anything it managed to start, and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _tail(path: Path, size: int = 16_384) -> str:
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - size))
        return handle.read().decode("utf-8", errors="replace")


def _find_report(stdout: str, nonce: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(nonce):
            try:
                report = json.loads(line[len(nonce) :])
            except json.JSONDecodeError:
                return None
            return report if isinstance(report, dict) else None
    return None


def _death(returncode: int | None, stderr: str) -> str:
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        reasons = {"SIGXCPU": "CPU time limit", "SIGXFSZ": "output limit", "SIGKILL": "killed"}
        return f"child died by {name} ({reasons.get(name, 'signal')})"
    last = stderr.strip().splitlines()[-1:] or [""]
    return f"child exited with {returncode} without a report {last[0][:200]}".strip()
