"""What sharing one store costs: the time to store an episode, and a report's latency while two runs write.

    python tests/store_costs.py [--episodes 3000] [--reports 30] [--out RESULT.json]

1. One process writes `--episodes` scripted episodes (1-12 messages of 10-800 characters each) into a new
   store, one transaction each, as a run does (journal append and fsync, open, commit, close); the time of
   each write is taken, and its median and 90th percentile are given per thousand.
2. `appliance report` of a finished run is timed `--reports` times on a quiet store, then again while two
   scripted runs (clembench, 80 instances each) write into the same file, until both have ended.

Run it alone: two heavy processes on two cores wreck each other's timings.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appliance.store import Store
from appliance.store.records import EpisodeRecord, RunRecord
from tests.fakes import hand_episode

REPO = Path(__file__).resolve().parent.parent
HELPER = REPO / "tests" / "scripted_run.py"


def episode(run_id: str, number: int, rng: random.Random) -> EpisodeRecord:
    texts = [("player", "x" * rng.randint(10, 800)) for _ in range(rng.randint(1, 12))]
    return hand_episode(run_id, "costs", str(number), "p", messages=texts)


def store_times(db: Path, count: int) -> list[dict[str, str | float]]:
    rng = random.Random(0)
    times = []
    with Store.open(db) as store:
        run = RunRecord(
            run_id="costs", started_at=datetime(2026, 1, 1), seed=0, config={}, versions={}, git_revision=None,
            file_hashes={},
        )  # fmt: skip
        store.create_run(run, [])
        for number in range(count):
            started = time.perf_counter()
            store.write_episode(episode("costs", number, rng))
            times.append(time.perf_counter() - started)
    return [
        {
            "episodes": f"{start}-{start + len(part)}",
            "median_ms": round(statistics.median(part) * 1000, 1),
            "p90_ms": round(sorted(part)[int(len(part) * 0.9)] * 1000, 1),
        }
        for start in range(0, len(times), 1000)
        if (part := times[start : start + 1000])
    ]


def report_times(db: Path, count: int, while_running: list[subprocess.Popen[bytes]] | None = None) -> dict[str, float]:
    """`count` reports, or as many as fit while the `while_running` processes live (at most `count`)."""
    times = []
    for _ in range(count):
        if while_running is not None and all(process.poll() is not None for process in while_running):
            break
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "appliance", "report", "costs", "--db", str(db)], cwd=REPO, capture_output=True
        )
        times.append(time.perf_counter() - started)
        assert result.returncode == 0, result.stderr
    return {"median_s": round(statistics.median(times), 3), "max_s": round(max(times), 3), "reports": len(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=3000)
    parser.add_argument("--reports", type=int, default=30)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    db = Path(tempfile.mkdtemp(prefix="store-costs-")) / "costs.duckdb"
    result: dict[str, object] = {"command": " ".join(sys.argv), "store_an_episode": store_times(db, args.episodes)}
    result["report_quiet"] = report_times(db, args.reports)
    writers = [
        subprocess.Popen(
            [sys.executable, str(HELPER), str(db), "clembench", "--limit", "80", "--seed", str(seed)],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for seed in (1, 2)
    ]
    time.sleep(2.0)  # past their imports: they write from here on
    result["report_while_two_runs_write"] = report_times(db, args.reports, while_running=writers)
    for writer in writers:
        writer.wait()
    print(json.dumps(result, indent=1))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
