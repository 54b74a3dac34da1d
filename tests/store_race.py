"""Many runs and readers on one store at once, some runs killed and resumed, the store checked after each round.

    python tests/store_race.py [--db NEW.duckdb] [--writers 4] [--readers 2] [--episodes 10000] [--kill-share 0.25]
                                  [--limit 6] [--delay 0.002] [--seed 0] [--out RESULT.json]

Each round starts `--writers` scripted runs together (tests/scripted_run.py, the families in turn,
`--limit` instances each, every model request taking `--delay` s), while `--readers` threads call
`appliance report`, `view`, `export` and `compare` on the same file in a loop. A share of the runs
(`--kill-share`) is killed with SIGKILL at a random moment once its journal holds a record, and then
resumed with `--resume`. When the round's runs have ended, `appliance store check --run ...` compares
them with their journals (checking every run after every round made the harness quadratic in the
store), and at the end `appliance store check` compares the whole store once. A store that differs is
counted and repaired (`appliance store repair`) so that the next round starts whole. Rounds go on until
the runs have stored `--episodes` episodes.

It prints one line per round and a summary, and writes the summary as JSON to `--out`. Exit 0 when
no episode went missing and no store needed repair, 1 otherwise. `make chaos` runs it at 4 writers,
2 readers and 10,000 episodes.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from appliance.store import Store  # noqa: E402
from tests.test_cli import cli  # noqa: E402

HELPER = REPO / "tests" / "scripted_run.py"
FAMILIES = ("clembench", "simulatebench", "pingpong", "simulbench")
#: what the runs print when their end-of-run check restores an episode from the journal
RESTORED = re.compile(r"(\d+) journaled episodes missing from the store .*: restored from its journal")


@dataclass
class Tally:
    rounds: int = 0
    runs: int = 0
    kills: int = 0
    resumes: int = 0
    episodes: int = 0
    #: journaled episodes that `store check` found missing from the store after a round
    missing: int = 0
    #: episodes differing from, or absent in, the journal (anything else `store check` finds)
    other_differences: int = 0
    #: rounds after which the store did not match its journal (and was repaired)
    stores_repaired: int = 0
    #: episodes the runs themselves restored from the journal at their end (and said so)
    restored_by_runs: int = 0
    failed_runs: int = 0
    reads: dict[str, int] = field(default_factory=dict)
    failed_reads: dict[str, int] = field(default_factory=dict)
    #: reads of a store or run with nothing stored yet ("no runs stored yet", "run R has no F episodes")
    empty_reads: int = 0
    wall_s: float = 0.0
    problems: list[str] = field(default_factory=list)


class Readers:
    """Threads that read the store through the CLI, as a colleague's report or page would, until stopped."""

    def __init__(self, db: Path, count: int, seed: int, tally: Tally) -> None:
        self.db, self.tally = db, tally
        self.stop = threading.Event()
        self.paused = threading.Event()
        self.lock = threading.Lock()
        #: runs that have ended, by family, for `compare`
        self.finished: dict[str, list[str]] = {}
        self.folder = Path(tempfile.mkdtemp(prefix="store-race-"))
        self.threads = [threading.Thread(target=self._loop, args=(seed + i,), daemon=True) for i in range(count)]

    def __enter__(self) -> Readers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=900)

    def _loop(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stop.is_set():
            if self.paused.is_set() or not self.db.exists():
                time.sleep(0.05)
                continue
            command = rng.choice(["report", "view", "export", "compare"])
            db = ["--db", str(self.db)]
            out = self.folder / f"{threading.get_ident()}-{command}"
            if command == "report":
                args = ["report", *db]
            elif command == "view":
                args = ["view", *db, "--out", str(out.with_suffix(".html")), "--max-transcripts", "20"]
            elif command == "export":
                args = ["export", *db, "--format", "jsonl", "--out", str(out)]
            else:
                pairs = [runs for runs in self.finished.values() if len(runs) >= 2]
                if not pairs:
                    continue
                args = ["compare", *rng.sample(rng.choice(pairs), 2), *db, "--force"]
            result = cli(*args)
            with self.lock:
                self.tally.reads[command] = self.tally.reads.get(command, 0) + 1
                # compare exits 1 on a regression between two unrelated runs: that is an answer, not a failure
                # a live run before its first commit: an answer, counted apart
                empty = re.search(r"no runs stored yet|run '\S+' has no \S+ episodes", result.stderr) is not None
                if empty:
                    self.tally.empty_reads += 1
                elif result.returncode not in (0, 1) or "Traceback" in result.stderr:
                    self.tally.failed_reads[command] = self.tally.failed_reads.get(command, 0) + 1
                    self.tally.problems.append(f"{command}: exit {result.returncode}: {result.stderr.strip()[-300:]}")


def journal_has_record(db: Path, run_id: str) -> bool:
    stream = db.with_name(db.name + ".journal") / f"run-{run_id}.jsonl"
    return stream.is_file() and stream.stat().st_size > 0


def play(db: Path, family: str, run_id: str, seed: int, args: argparse.Namespace, kill: bool, tally: Tally) -> None:
    """One run, killed once at a random moment after its first journal record where `kill`, then resumed."""
    rng = random.Random(seed)
    common = [sys.executable, str(HELPER), str(db), family, "--seed", str(seed), "--delay", str(args.delay)]
    start = [*common, "--limit", str(args.limit), "--run-id", run_id]
    process = subprocess.Popen(start, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs: list[tuple[int, str, str]] = []
    if kill:
        deadline = time.monotonic() + 300
        while process.poll() is None and not journal_has_record(db, run_id) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 2.0))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.communicate()
            tally.kills += 1
            process = subprocess.Popen(
                [*common, "--resume", run_id], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            tally.resumes += 1
    out, err = process.communicate(timeout=1800)
    outputs.append((process.returncode, out, err))
    for code, out, err in outputs:
        tally.restored_by_runs += sum(int(n) for n in RESTORED.findall(err + out))
        if code != 0:
            tally.failed_runs += 1
            tally.problems.append(f"run {run_id}: exit {code}: {err.strip()[-300:]}")


def check(db: Path, tally: Tally, readers: Readers, runs: list[str] | None = None) -> str:
    """`store check` of the round's runs (of everything with `runs` None); a store that differs is counted
    and repaired for the next round."""
    result = cli("store", "check", "--db", str(db), *(arg for run_id in runs or [] for arg in ("--run", run_id)))
    text = result.stdout + result.stderr
    episodes = sum(int(n) for n in re.findall(r"^run \S+: (\d+) episodes", text, flags=re.M))
    missing = sum(int(n) for n in re.findall(r"(\d+) journaled episodes missing", text))
    others = sum(int(n) for n in re.findall(r"(\d+) (?:episodes differ|stored episodes not in)", text))
    tally.missing += missing
    tally.other_differences += others
    if result.returncode != 0:
        tally.stores_repaired += 1
        tally.problems.append(f"round {tally.rounds}: store check exit {result.returncode}: {text.strip()[-500:]}")
        readers.paused.set()
        time.sleep(2)  # let the readers' commands in flight end: repair swaps the file
        repaired = cli("store", "repair", "--db", str(db))
        readers.paused.clear()
        if repaired.returncode != 0:
            raise SystemExit(f"store repair failed: {repaired.stderr.strip()}")
    return f"store check exit {result.returncode}, {missing} missing, {others} other differences" + (
        f", {episodes} episodes journaled" if episodes else ""
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="a store to create (default: one in a new temporary folder)")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--kill-share", type=float, default=0.25)
    parser.add_argument("--limit", type=int, default=6)
    parser.add_argument("--delay", type=float, default=0.002)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.db is None:
        args.db = Path(tempfile.mkdtemp(prefix="store-race-")) / "race.duckdb"
    elif args.db.exists():
        raise SystemExit(f"{args.db}: exists; the race writes a new store")
    rng = random.Random(args.seed)
    tally = Tally()
    started = time.monotonic()
    args.db.parent.mkdir(parents=True, exist_ok=True)
    with Readers(args.db, args.readers, args.seed, tally) as readers:
        while tally.episodes < args.episodes:
            tally.rounds += 1
            threads = []
            round_ids: dict[str, str] = {}
            for slot in range(args.writers):
                family = FAMILIES[(tally.rounds + slot) % len(FAMILIES)]
                run_id = f"race-{args.seed}-{tally.rounds}-{slot}"
                round_ids[run_id] = family
                kill = rng.random() < args.kill_share
                seed = rng.randrange(1 << 30)
                threads.append(threading.Thread(target=play, args=(args.db, family, run_id, seed, args, kill, tally)))
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            tally.runs += len(threads)
            for run_id, family in round_ids.items():
                readers.finished.setdefault(family, []).append(run_id)
            line = check(args.db, tally, readers, list(round_ids))
            tally.episodes = stored_episodes(args.db)
            print(
                f"round {tally.rounds}: {tally.episodes} episodes stored, {tally.kills} kills; {line}; "
                f"reads {sum(tally.reads.values())} ({sum(tally.failed_reads.values())} failed)",
                flush=True,
            )
        # each round checked its own runs; the whole store once at the end (no round spoiled an earlier one)
        print(f"all rounds: {check(args.db, tally, readers)}", flush=True)
    tally.wall_s = round(time.monotonic() - started, 1)
    summary = asdict(tally) | {"command": " ".join(sys.argv), "writers": args.writers, "readers": args.readers}
    summary |= {"db": str(args.db), "kill_share": args.kill_share, "limit": args.limit, "delay_s": args.delay}
    print(json.dumps({k: v for k, v in summary.items() if k != "problems"}, indent=1))
    for problem in tally.problems[:20]:
        print("problem:", problem)
    if args.out is not None:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    clean = tally.missing == tally.stores_repaired == tally.restored_by_runs == tally.failed_runs == 0
    return 0 if clean else 1


def stored_episodes(db: Path) -> int:
    with Store.open(db, read_only=True) as store:
        return int(store.query("SELECT count(*) FROM episodes")[0][0])


if __name__ == "__main__":
    sys.exit(main())
