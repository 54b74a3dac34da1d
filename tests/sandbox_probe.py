"""Runs sandbox cases as whoever starts it and prints their results as JSON (one list).

The host tests start it as an ordinary user (`as_ordinary_user`), so that the appliance's own side
of the sandbox runs without root, as it does on a lab's workstation. stdin: a JSON object with
`limits` and `runs`, each run a candidate's `code`, its `cases` and its `layers`; with `subreaper`
true it first makes itself a child subreaper (as a container's pid 1 is) and reports, after each
run, the zombies among its children (`zombies`).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from appliance.sandbox.cases import TestCase
from appliance.sandbox.limits import SandboxLimits
from appliance.sandbox.run import run_tests

PR_SET_CHILD_SUBREAPER = 36


def zombie_children() -> list[int]:
    """This process's children that have ended and were never waited for."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.append(int(entry.name))
    return found


def main() -> None:
    request = json.loads(sys.stdin.read())
    if request.get("subreaper"):
        assert ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    limits = SandboxLimits(**request["limits"])
    results = []
    for run in request["runs"]:
        cases = [TestCase(**case) for case in run["cases"]]
        layers = run["layers"]
        result = run_tests(
            run["code"], cases, limits, audit_hook=layers == "all-layers", seccomp=layers != "namespaces-only"
        )
        results.append(asdict(result) | ({"zombies": zombie_children()} if request.get("subreaper") else {}))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
