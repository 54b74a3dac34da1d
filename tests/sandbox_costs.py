"""The sandbox's cost per candidate, and its pass counts, over the shipped code problems.

Candidates: every problem's reference, a stub returning None for each, the partial solutions of
tests/test_sandbox.py, and with `--store` every code a model wrote in that store's code reviews.
Prints one JSON object: the median and quartiles of the wall time per
candidate over `--rounds` passes (default limits), and the passed count of every candidate, so
that two versions of the sandbox can be compared on the same machine, run one after the other.

    .venv/bin/python -m tests.sandbox_costs --rounds 5 > costs.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from appliance.sandbox.limits import SandboxLimits
from appliance.sandbox.run import run_tests
from appliance.scenarios.deepeval.code_review import load_problems

REPO = Path(__file__).resolve().parent.parent


def candidates(store: Path | None = None) -> list[tuple[str, str, list]]:  # type: ignore[type-arg]
    from tests.test_sandbox import PARTIAL

    problems = load_problems(REPO / "scenarios" / "deepeval" / "code_problems.toml")
    by_id = {p.id: p for p in problems}
    found = [(f"{p.id}:reference", p.reference, list(p.tests)) for p in problems]
    found += [
        (f"{p.id}:stub", f"def {p.function}(*args, **kwargs):\n    return None\n", list(p.tests)) for p in problems
    ]
    found += [(f"{pid}:partial", code, list(by_id[pid].tests)) for pid, (code, _) in PARTIAL.items()]
    if store is not None:
        found += _model_written(store, by_id)
    return found


def _model_written(store: Path, problems: dict) -> list[tuple[str, str, list]]:  # type: ignore[type-arg]
    """Each Programmer turn of the store's code-review episodes, against its episode's problem."""
    import duckdb

    from appliance.scenarios.deepeval.code_review import extract_code

    with duckdb.connect(str(store), read_only=True) as connection:
        rows = connection.execute(
            "SELECT e.episode_id, e.metadata, m.idx, m.text FROM episodes e JOIN messages m USING (episode_id) "
            "WHERE e.instance_id LIKE 'code_review/%' AND m.speaker = 'Programmer' ORDER BY 1, 3"
        ).fetchall()
    found = []
    for episode_id, metadata, index, text in rows:
        problem = problems[json.loads(metadata)["item"]]
        found.append((f"{episode_id}#{index}", extract_code(text), list(problem.tests)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--store", type=Path, help="a store whose code reviews' model-written code is added")
    arguments = parser.parse_args()
    limits = SandboxLimits()
    walls: list[float] = []
    passed: dict[str, int] = {}
    for _ in range(arguments.rounds):
        for name, code, tests in candidates(arguments.store):
            result = run_tests(code, tests, limits)
            walls.append(result.wall_s * 1000)
            passed[name] = result.passed
    quartiles = statistics.quantiles(walls, n=4)
    print(
        json.dumps(
            {
                "candidates": len(passed),
                "runs": len(walls),
                "median_ms": round(statistics.median(walls), 2),
                "q1_ms": round(quartiles[0], 2),
                "q3_ms": round(quartiles[2], 2),
                "passed": passed,
            }
        )
    )


if __name__ == "__main__":
    main()
