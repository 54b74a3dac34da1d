"""How often `appliance compare` cries wolf, and how often it catches a real drop, on scripted runs.

    python -m tests.gate_error_rates --pairs 200 --conversations 16 --power-pairs 50 --out FILE.md

Each pair is two PingPong runs through the real runner, store and gate. The scripted model stands for
one model sampled twice: every conversation has a quality of its own (shared by both runs of a pair,
drawn from the pair's run seed and the instance, as a benchmark item's difficulty is), and every
judge score scatters around it by -1/0/+1 from the run's own sampling stream; reply lengths and the
occasional refusal vary the same way. A/A pairs differ only in that stream. For power, the
candidate's judges mark a turn one point lower with probability `drop` (the injected fall of the
mean is a little less: scores do not go below 1).

For every pair the gate's Holm-adjusted p-values are read against several alphas, beside the
uncorrected per-metric test that the gate used before, so docs/regression.md can state both.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appliance.catalog.models import load_catalog
from appliance.catalog.panels import Panel
from appliance.compare.gate import Comparison, Thresholds, compare_runs
from appliance.engine.types import GenerationRequest
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import load_family
from appliance.store import Store
from appliance.store.journal import journal_folder
from tests.fakes import REPO, Reply, role_of, scripted_factory

ALPHAS = (0.01, 0.05, 0.10)


def sampled_model(stream: int, drop: float) -> Reply:
    """Player, interrogator and judge of one run; `stream` is the run's sampling randomness."""

    def reply(model: str, request: GenerationRequest) -> str:
        rng = random.Random(f"{stream}/{request.sampling.seed}")
        if request.grammar is not None and "turns" in request.grammar:
            text = "\n".join(m.content for m in request.messages)
            replies = re.findall(r"^\[\d+\] [^:]+: (.*)$", text, flags=re.MULTILINE)
            quality = 2 + random.Random(f"quality/{request.sampling.seed}").randrange(3)  # the item's own, in 2..4
            turns = []
            for _ in replies:
                scores = {}
                for criterion in ("in_character", "entertaining", "fluent"):
                    score = quality + rng.choice((-1, 0, 0, 1))
                    score -= rng.random() < drop
                    scores[criterion] = min(5, max(1, score))
                turns.append(scores | {"refusal": rng.random() < 0.02})
            return json.dumps({"reasoning": "", "turns": turns})
        if role_of(request) == "interrogator":
            return "Tell me more."
        return "An answer" + " that goes on" * rng.randrange(1, 6) + "."

    return reply


@dataclass
class PairResult:
    drop: float
    #: the smallest Holm-adjusted regression p-value over the comparison's metrics
    holm_min: float
    #: the smallest uncorrected one-sided regression p-value
    raw_min: float
    #: the earlier gate: some metric's whole 95% bootstrap interval beyond its allowed drop
    interval_alarm: bool
    metrics: int


def play(db: Path, seed: int, stream: int, drop: float, conversations: int) -> str:
    catalog = load_catalog(REPO / "models.toml")
    config = RunConfig(
        scenarios=["pingpong"],
        players=["smollm2-135m"],
        interrogator="smollm2-135m",
        panel=Panel(name="aa", judges=["smollm2-135m"]),
        seed=seed,
        limit=conversations,
        models_file=str(catalog.source),
    )
    with Store.open(db) as store:
        runner = Runner(catalog, store, scripted_factory(sampled_model(stream, drop)))
        return runner.execute(config, [load_family("pingpong")]).run_id


def measure_pair(work: Path, index: int, drop: float, conversations: int) -> PairResult:
    """One pair in a store of its own, removed after (a store of hundreds of runs slows each open)."""
    db = work / f"pair-{index}.duckdb"
    seed = 1000 + index
    base = play(db, seed, 2 * index, 0.0, conversations)
    candidate = play(db, seed, 2 * index + 1, drop, conversations)
    with Store.open(db, read_only=True) as store:
        comparison: Comparison = compare_runs(store, base, candidate, Thresholds(), seed=index)
    holm = [m.p_regression_holm for m in comparison.metrics if m.p_regression_holm is not None]
    raw = [m.p_regression for m in comparison.metrics if m.p_regression is not None]
    interval_alarm = any(
        m.ci is not None and (m.ci[1] < -m.max_drop if m.higher_is_better else m.ci[0] > m.max_drop)
        for m in comparison.metrics
    )
    shutil.rmtree(journal_folder(db))
    for path in work.glob(f"{db.name}*"):
        path.unlink()
    return PairResult(drop, min(holm, default=1.0), min(raw, default=1.0), interval_alarm, len(comparison.metrics))


def rates(results: list[PairResult], alpha: float) -> tuple[float, float]:
    """(share of pairs the gate fails at `alpha`, share the same test uncorrected would fail)."""
    n = len(results)
    return sum(r.holm_min <= alpha for r in results) / n, sum(r.raw_min <= alpha for r in results) / n


def wilson(share: float, n: int) -> tuple[float, float]:
    """A 95% interval for a proportion (Wilson's, sound near 0)."""
    z = 1.96
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z * (share * (1 - share) / n + z * z / (4 * n * n)) ** 0.5 / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=200, help="A/A pairs")
    parser.add_argument("--power-pairs", type=int, default=50, help="pairs per injected drop")
    parser.add_argument("--drops", default="0.15,0.3,0.6", help="chance that a judge score is one point lower")
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--work", type=Path, default=Path("gate-error-rates"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    groups: dict[float, list[PairResult]] = {}
    index = 0
    for drop, count in [(0.0, args.pairs)] + [(float(d), args.power_pairs) for d in args.drops.split(",")]:
        groups[drop] = []
        for _ in range(count):
            groups[drop].append(measure_pair(args.work, index, drop, args.conversations))
            index += 1
    lines = [
        f"# Gate error rates: scripted PingPong pairs, {args.conversations} conversations each",
        "",
        f"`python -m tests.gate_error_rates --pairs {args.pairs} --power-pairs {args.power_pairs} "
        f"--drops {args.drops} --conversations {args.conversations}` ({time.perf_counter() - started:.0f} s; "
        f"{groups[0.0][0].metrics} metrics per comparison; 2,000 resamples)",
        "",
        "| pairs | judge scores lowered | pairs | "
        + " | ".join(f"gate fails, alpha {a:g}" for a in ALPHAS)
        + " | uncorrected, 0.05 | earlier gate (95% intervals) |",
        "| --- | ---: | ---: | " + " | ".join(["---:"] * (len(ALPHAS) + 2)) + " |",
    ]
    for drop, results in groups.items():
        if not results:
            continue
        cells = []
        for alpha in ALPHAS:
            holm, _ = rates(results, alpha)
            low, high = wilson(holm, len(results))
            cells.append(f"{holm:.3f} [{low:.3f}, {high:.3f}]")
        cells.append(f"{rates(results, 0.05)[1]:.3f}")
        cells.append(f"{sum(r.interval_alarm for r in results) / len(results):.3f}")
        kind = "A/A" if drop == 0.0 else "injected drop"
        lines.append(f"| {kind} | {drop:g} | {len(results)} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
