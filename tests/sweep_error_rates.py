"""How often `appliance compare --sweep` cries wolf, and how often it finds a checkpoint that is better.

    python -m tests.sweep_error_rates --sweeps 200 --power-sweeps 50 --conversations 16 --out FILE.md

Each sweep is one scripted PingPong run of a base and four checkpoints (steps 5, 10, 20, 40) through
the real catalog expansion, runner, store and `compare_sweep` (tests/scripted_sweep.py has the model).
In an A/A sweep every checkpoint is the base sampled again. For power, one checkpoint (step 20) lifts
the judges' scores by `lift` (a score rises one point with that probability), the others are the base.

Read for each sweep, at several alphas:
- the gate: the last checkpoint declared a regression (what makes `compare --sweep` exit 1);
- any false claim: some checkpoint of an A/A sweep called better or worse than the base;
- the same claims made the way a lab would without `--sweep`: one `compare --pair` per checkpoint,
  each with Holm across its own metrics only;
- power: the lifted checkpoint called better than the base.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appliance.compare.gate import MetricComparison, Thresholds
from appliance.compare.sweep import compare_sweep
from appliance.store import Store
from appliance.util.stats import holm_adjusted
from tests.gate_error_rates import wilson
from tests.scripted_sweep import SWEEP, scripted_sweep_run

ALPHAS = (0.01, 0.05, 0.10)
STEPS = (5, 10, 20, 40)
LIFTED = 20


@dataclass
class SweepOutcome:
    lift: float
    metrics: list[MetricComparison]

    def gate(self, alpha: float) -> bool:
        last = f"{SWEEP}@checkpoint-{STEPS[-1]}"
        return any(m.candidate_player == last and _at(m.p_regression_holm, alpha) for m in self.metrics)

    def any_claim(self, alpha: float) -> bool:
        return any(_at(m.p_regression_holm, alpha) or _at(m.p_improvement_holm, alpha) for m in self.metrics)

    def any_claim_one_compare_each(self, alpha: float) -> bool:
        """Holm within each checkpoint's own metrics, as `compare --pair` once per checkpoint does."""
        for step in STEPS:
            own = [m for m in self.metrics if m.candidate_player == f"{SWEEP}@checkpoint-{step}"]
            for adjusted in (
                holm_adjusted([m.p_regression for m in own]),
                holm_adjusted([m.p_improvement for m in own]),
            ):
                if any(_at(p, alpha) for p in adjusted):
                    return True
        return False

    def lifted_found_alone(self, alpha: float) -> bool:
        """The lifted checkpoint's improvement with Holm across its own metrics only."""
        lifted = [m for m in self.metrics if m.candidate_player == f"{SWEEP}@checkpoint-{LIFTED}"]
        return any(_at(p, alpha) for p in holm_adjusted([m.p_improvement for m in lifted]))

    def lifted_found(self, alpha: float) -> bool:
        lifted = f"{SWEEP}@checkpoint-{LIFTED}"
        return any(m.candidate_player == lifted and _at(m.p_improvement_holm, alpha) for m in self.metrics)


def _at(p: float | None, alpha: float) -> bool:
    return p is not None and p <= alpha


def measure(work: Path, index: int, lift: float, conversations: int) -> SweepOutcome:
    """One sweep in a folder of its own, removed after; every p-value kept so any alpha can be read."""
    folder = work / f"sweep-{index}"
    folder.mkdir(parents=True)
    db = folder / "store.duckdb"
    lifts = {step: (lift if step == LIFTED else 0.0) for step in STEPS}
    run_id = scripted_sweep_run(folder, db, lifts, conversations=conversations, stream=index, refusals=0.02, seed=index)
    with Store.open(db, read_only=True) as store:
        result = compare_sweep(store, run_id, run_id, SWEEP, Thresholds(), seed=index)
    shutil.rmtree(folder)
    return SweepOutcome(lift, result.comparison.metrics)


def share(outcomes: list[SweepOutcome], test: str, alpha: float) -> str:
    hits = sum(getattr(outcome, test)(alpha) for outcome in outcomes)
    low, high = wilson(hits / len(outcomes), len(outcomes))
    return f"{hits / len(outcomes):.3f} [{low:.3f}, {high:.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", type=int, default=200, help="A/A sweeps")
    parser.add_argument("--power-sweeps", type=int, default=50, help="sweeps per lift")
    parser.add_argument("--lifts", default="0.3,0.6", help="chance that a judge score of the lifted checkpoint rises")
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--work", type=Path, default=Path("sweep-error-rates"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    plan = [(0.0, args.sweeps)] + [(float(lift), args.power_sweeps) for lift in args.lifts.split(",")]
    groups: dict[float, list[SweepOutcome]] = {}
    index = 0
    for lift, count in plan:
        groups[lift] = []
        for _ in range(count):
            groups[lift].append(measure(args.work, index, lift, args.conversations))
            index += 1
    aa = groups[0.0]
    tests = len(aa[0].metrics)
    lines = [
        f"# Sweep gate error rates: scripted PingPong sweeps, base + {len(STEPS)} checkpoints, "
        f"{args.conversations} conversations each",
        "",
        f"`python -m tests.sweep_error_rates --sweeps {args.sweeps} --power-sweeps {args.power_sweeps} "
        f"--lifts {args.lifts} --conversations {args.conversations}` ({time.perf_counter() - started:.0f} s; "
        f"{tests} tests per sweep: {len(STEPS)} checkpoints x {tests // len(STEPS)} metrics; 2,000 resamples)",
        "",
        "| sweeps | what is counted | " + " | ".join(f"alpha {a:g}" for a in ALPHAS) + " |",
        "| --- | --- | " + " | ".join(["---:"] * len(ALPHAS)) + " |",
    ]
    rows = [
        ("gate fails (last checkpoint called a regression)", "gate"),
        ("any checkpoint called better or worse (`--sweep`: Holm across all)", "any_claim"),
        ("any checkpoint called better or worse (one `compare` per checkpoint)", "any_claim_one_compare_each"),
    ]
    for label, test in rows:
        cells = [share(aa, test, alpha) for alpha in ALPHAS]
        lines.append(f"| A/A, {len(aa)} | {label} | " + " | ".join(cells) + " |")
    for lift, outcomes in groups.items():
        if lift == 0.0:
            continue
        cells = [share(outcomes, "lifted_found", alpha) for alpha in ALPHAS]
        label = f"step {LIFTED} (lift {lift:g}) called better than the base"
        lines.append(f"| lift {lift:g}, {len(outcomes)} | {label} (`--sweep`) | " + " | ".join(cells) + " |")
        cells = [share(outcomes, "lifted_found_alone", alpha) for alpha in ALPHAS]
        lines.append(f"| lift {lift:g}, {len(outcomes)} | {label} (its own `compare`) | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
