"""Runs sandbox cases as whoever starts it and prints their results as JSON (one list).

The host tests start it as an ordinary user (`as_ordinary_user`), so that the appliance's own side
of the sandbox runs without root, as it does on a lab's workstation. stdin: a JSON object with
`limits` and `runs`, each run a candidate's `code`, its `cases` and its `layers`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

from appliance.sandbox.cases import TestCase
from appliance.sandbox.limits import SandboxLimits
from appliance.sandbox.run import run_tests


def main() -> None:
    request = json.loads(sys.stdin.read())
    limits = SandboxLimits(**request["limits"])
    results = []
    for run in request["runs"]:
        cases = [TestCase(**case) for case in run["cases"]]
        layers = run["layers"]
        result = run_tests(
            run["code"], cases, limits, audit_hook=layers == "all-layers", seccomp=layers != "namespaces-only"
        )
        results.append(asdict(result))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
