"""Workload 2: a PingPong run by the appliance against sequential baselines.

The honest baseline is how a user drives a local model without us: one request
at a time on one slot, the whole history sent every turn, and the longest
common prefix with the previous request reused (llama-server with one slot,
or llama-cpp-python's `Llama`). A second baseline reuses nothing. All arms use
the catalog's engine settings, the same models, sampling, seeds, instances and
judges, greedy decoding, and a temporary store each. Every request's outcome
(generated token ids, or a scoring request's log-probabilities) is recorded,
so the appliance and the honest baseline are compared at the token level.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from appliance.bench.rss import PeakRss
from appliance.catalog.models import Catalog, ModelSpec
from appliance.catalog.panels import Panel
from appliance.engine.backend import Backend, BackendCounters
from appliance.engine.factory import open_backend
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.types import Completion, GenerationRequest
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios.base import ScenarioFamily
from appliance.store import Store

ArmKind = Literal["appliance", "single-slot", "stateless"]
#: arms beside the appliance that play the same workload a different way (and are compared by message)
SideArm = Literal["plain", "llama_cpp"]
#: what one served request is compared by: model, prompt tokens (or text), outcome
Served = tuple[str, tuple[Any, ...], tuple[Any, ...]]
#: a request as a llama.cpp model computes it: every token it prefills, and the positions whose logits it reads
ReadPrompt = tuple[list[int], range]
#: prompts kept per model for measuring the raw prefill rate on the workload's own text
PROMPT_SAMPLE = 32


class Workload(BaseModel):
    """What a workload asked of each llama.cpp model, counted as no engine could do less: every distinct prompt
    token (the prefix tree of all prompts) and every distinct logits row read (a row is the prefix it ends) once,
    and every generated token."""

    distinct_prompt_tokens: dict[str, int] = {}
    read_rows: dict[str, int] = {}
    decode_tokens: dict[str, int] = {}
    #: per model, some of the workload's prompts (the raw prefill rate is measured on them); not saved
    prompt_sample: dict[str, list[list[int]]] = Field(default={}, exclude=True)


class ArmResult(BaseModel):
    wall_s: float
    episodes: int
    episodes_per_hour: float
    prefill_tokens: int
    cached_prompt_tokens: int
    decode_tokens: int
    peak_kv_cells: int
    #: the process's highest resident memory during the arm, and what it held as the arm began (`rss.PeakRss`)
    peak_rss_mb: float = 0.0
    start_rss_mb: float = 0.0
    #: prompt tokens found in a cache but computed again (exact mode's rule, or too short to fork)
    recomputed_cached_tokens: int = 0
    #: prompt tokens served by caches copied back from host memory, caches saved there, and its peak size
    restored_tokens: int = 0
    saved_caches: int = 0
    host_cache_peak_mb: float = 0.0
    #: prefill-computed tokens lost when caches were overwritten (BackendCounters.evicted_tokens)
    evicted_tokens: int = 0
    #: seconds inside llama_decode on prefill chunks and on decode steps, and sampling; the rest of the
    #: wall time is the scheduler, the episodes, the store and Python
    prefill_s: float = 0.0
    decode_s: float = 0.0
    sample_s: float = 0.0
    requests: int = 0


class EndToEndResult(BaseModel):
    conversations: int
    turns: int
    players: list[str]
    panel: list[str]
    appliance: ArmResult
    #: sequential, one slot, the previous request's common prefix reused (the honest baseline)
    baseline: ArmResult
    #: sequential, nothing reused
    stateless: ArmResult | None = None
    #: baseline wall time / appliance wall time
    speedup: float
    speedup_vs_stateless: float | None = None
    #: stored messages and verdict texts, appliance against the honest baseline
    transcripts_identical: bool
    messages_compared: int
    messages_differing: int
    #: the plain driver (`plain_driver.py`: each phase one batch, no scheduler or store; vLLM's own way),
    #: its wall time / the appliance's, and the stored messages that differ from the appliance's
    plain: ArmResult | None = None
    speedup_vs_plain: float | None = None
    plain_messages_differing: int | None = None
    #: the appliance on llama.cpp with the same GGUFs in every role (for a vLLM or transformers bench), its wall
    #: time / this appliance's, and the stored messages that differ
    llama_cpp: ArmResult | None = None
    speedup_vs_llama_cpp: float | None = None
    llama_cpp_messages_differing: int | None = None
    #: every request's generated token ids or log-probabilities, appliance against the honest baseline
    tokens_identical: bool | None = None
    requests_compared: int = 0
    requests_differing: int = 0
    #: the differing requests by model and kind ("smollm2-135m/generation"), for whoever looks into them
    differing_by_kind: dict[str, int] = {}
    #: what the appliance arm asked of each model, the ideal time's inputs
    workload: Workload = Workload()
    #: the appliance's prefilled tokens / the distinct prompt tokens (1.0: each computed once)
    prefill_ratio: float | None = None
    #: the text of every message the appliance arm stored (verdicts aside); not saved
    message_texts: list[str] = Field(default=[], exclude=True)


def sequential_backend(catalog: Catalog, spec: ModelSpec, *, reuse: bool) -> Backend:
    """One sequence at a time with the catalog entry's own engine settings; with `reuse`, the one slot keeps
    its cache and the next request reuses their common prefix, without it every request starts cold."""
    if spec.backend == "transformers":
        from appliance.engine.transformers_backend import transformers_backend_for

        return transformers_backend_for(catalog, spec, slots=1, reuse_cache=reuse)
    single = spec.model_copy(update={"slots": 1})
    if single.reads("host_cache_mb"):  # nothing kept beyond the one slot
        single = single.with_options(host_cache_mb=0)
    backend = open_backend(catalog, single, parallel=1)
    if isinstance(backend, LlamaCppBackend):
        backend.reuse_cache = reuse
    return backend


class RecordingBackend:
    """A backend that notes each request's prompt and outcome as it finishes."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name
        self.counters: BackendCounters = inner.counters
        self.served: list[Served] = []
        self.prompts: list[ReadPrompt] = []
        self._pending: dict[int, tuple[Any, ...]] = {}

    def submit(self, request: GenerationRequest) -> int:
        ticket = self.inner.submit(request)
        if isinstance(self.inner, LlamaCppBackend):
            tokens, reads = self.inner.request_reads(request)
            self.prompts.append((tokens, reads))
            self._pending[ticket] = tuple(tokens)
        else:
            scoring = request.scoring.continuation if request.scoring is not None else None
            self._pending[ticket] = (request.prompt, request.messages, scoring)
        return ticket

    def step(self) -> list[tuple[int, Completion]]:
        done = self.inner.step()
        for ticket, completion in done:
            outcome: tuple[Any, ...] = (
                (completion.scores.token_logprobs, completion.scores.choice_logprobs)
                if completion.scores is not None
                else (completion.finish_reason, completion.token_ids, completion.error)
            )
            self.served.append((self.name, self._pending.pop(ticket), outcome))
        return done

    @property
    def busy(self) -> bool:
        return self.inner.busy

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def close(self) -> None:
        self.inner.close()


def _arm(
    catalog: Catalog, config: RunConfig, family: ScenarioFamily, db: Path, kind: ArmKind
) -> tuple[ArmResult, list[tuple[str, int, str]], list[RecordingBackend]]:
    recorders: list[RecordingBackend] = []

    def factory(catalog: Catalog, spec: ModelSpec, *, parallel: int) -> Backend:
        if kind == "appliance":
            backend = open_backend(catalog, spec, parallel=parallel)
        else:
            backend = sequential_backend(catalog, spec, reuse=kind == "single-slot")
        recorder = RecordingBackend(backend)
        recorders.append(recorder)
        return recorder

    with PeakRss() as rss, Store.open(db) as store:
        started = time.perf_counter()
        summary = Runner(catalog, store, backend_factory=factory).execute(config, [family])
        wall = time.perf_counter() - started
        transcript = store.run_transcript(summary.run_id)
    counters = [recorder.counters for recorder in recorders]
    episodes = summary.episodes_finished
    result = ArmResult(
        wall_s=wall,
        episodes=episodes,
        episodes_per_hour=episodes * 3600 / wall if wall else 0.0,
        prefill_tokens=summary.prompt_tokens - summary.cached_prompt_tokens,
        cached_prompt_tokens=summary.cached_prompt_tokens,
        decode_tokens=summary.completion_tokens,
        peak_kv_cells=max((c.peak_kv_cells for c in counters), default=0),
        peak_rss_mb=rss.peak_mb,
        start_rss_mb=rss.start_mb,
        recomputed_cached_tokens=sum(c.recomputed_cached_tokens for c in counters),
        restored_tokens=sum(c.restored_tokens for c in counters),
        saved_caches=sum(c.saved_caches for c in counters),
        evicted_tokens=sum(c.evicted_tokens for c in counters),
        host_cache_peak_mb=sum(c.host_cache_peak_bytes for c in counters) / 2**20,
        prefill_s=sum(c.prefill_s for c in counters),
        decode_s=sum(c.decode_s for c in counters),
        sample_s=sum(c.sample_s for c in counters),
        requests=sum(len(recorder.served) for recorder in recorders),
    )
    return result, transcript, recorders


def unique_prefix_tokens(prompts: list[list[int]]) -> int:
    """Nodes of the prefix tree of `prompts`: tokens that must be computed once however well caches are shared.
    In sorted order each prompt adds what it does not share with the one before it."""
    total = 0
    previous: tuple[int, ...] = ()
    for tokens in sorted(set(map(tuple, prompts))):
        shared = 0
        while shared < min(len(tokens), len(previous)) and tokens[shared] == previous[shared]:
            shared += 1
        total += len(tokens) - shared
        previous = tokens
    return total


def distinct_read_rows(prompts: list[ReadPrompt]) -> int:
    """Logits rows the prompts read, each counted once: a row is a function of the prefix it ends, so prompts
    that share their tokens up to a read position read the same numbers there."""
    nodes: dict[tuple[int, int], int] = {}
    read: set[int] = set()
    for tokens, reads in prompts:
        node = 0
        for position, token in enumerate(tokens[: reads.stop]):
            node = nodes.setdefault((node, token), len(nodes) + 1)
            if position >= reads.start:
                read.add(node)
    return len(read)


def count_differing(ours: list[Any], theirs: list[Any]) -> int:
    """Items of either list without an identical twin in the other (order ignored: the arms interleave)."""
    a, b = Counter(ours), Counter(theirs)
    return sum((a - b).values()) + sum((b - a).values())


def workload_config(
    catalog: Catalog,
    family: ScenarioFamily,
    *,
    conversations: int,
    turns: int,
    player: str,
    interrogator: str,
    panel: Panel,
    seed: int,
    parallel: int,
) -> RunConfig:
    """The end-to-end workload as a run: greedy, `conversations` instances of `turns` turns each."""
    return RunConfig(
        scenarios=[family.name],
        players=[player],
        interrogator=interrogator,
        panel=panel,
        seed=seed,
        limit=conversations,
        parallel=parallel,
        models_file=str(catalog.source),
        greedy=True,
        turns=turns,
    )


def appliance_arm(catalog: Catalog, family: ScenarioFamily, config: RunConfig) -> tuple[ArmResult, list[str], Workload]:
    """The appliance alone on the workload (a temporary store): its figures, every stored message's text and
    what it asked of each llama.cpp model."""
    with tempfile.TemporaryDirectory(prefix="appliance-bench-") as folder:
        arm, transcript, recorders = _arm(catalog, config, family, Path(folder) / "appliance.duckdb", "appliance")
    return arm, _message_texts(transcript), count_workload(recorders)


def count_workload(recorders: list[RecordingBackend]) -> Workload:
    """Per llama.cpp model (other backends record no prompts): distinct prompt tokens, distinct logits rows read,
    generated tokens, and an even sample of the prompts."""
    prompts: dict[str, list[ReadPrompt]] = {}
    decoded: Counter[str] = Counter()
    for recorder in recorders:
        prompts.setdefault(recorder.name, []).extend(recorder.prompts)
        decoded[recorder.name] += recorder.counters.completion_tokens
    prompts = {name: found for name, found in prompts.items() if found}
    return Workload(
        distinct_prompt_tokens={name: unique_prefix_tokens([t for t, _ in found]) for name, found in prompts.items()},
        read_rows={name: distinct_read_rows(found) for name, found in prompts.items()},
        decode_tokens={name: decoded[name] for name in prompts},
        prompt_sample={
            name: [t for t, _ in found[:: max(1, len(found) // PROMPT_SAMPLE)][:PROMPT_SAMPLE]]
            for name, found in prompts.items()
        },
    )


def with_side_arm(e2e: EndToEndResult, side: SideArm, arm: ArmResult, texts: list[str]) -> EndToEndResult:
    """`e2e` with a side arm, its wall time / the appliance's, and the messages that differ (order aside)."""
    return e2e.model_copy(
        update={
            side: arm,
            f"speedup_vs_{side}": arm.wall_s / e2e.appliance.wall_s if e2e.appliance.wall_s else None,
            f"{side}_messages_differing": count_differing(e2e.message_texts, texts),
        }
    )


def _message_texts(transcript: list[tuple[str, int, str]]) -> list[str]:
    return [text for key, _, text in transcript if not key.endswith("/verdict")]


def end_to_end(
    catalog: Catalog,
    family: ScenarioFamily,
    *,
    conversations: int,
    turns: int,
    player: str,
    interrogator: str,
    panel: Panel,
    seed: int,
    parallel: int,
    stateless: bool = True,
) -> EndToEndResult:
    base = workload_config(
        catalog,
        family,
        conversations=conversations,
        turns=turns,
        player=player,
        interrogator=interrogator,
        panel=panel,
        seed=seed,
        parallel=parallel,
    )
    sequential = base.model_copy(update={"parallel": 1})
    with tempfile.TemporaryDirectory(prefix="appliance-bench-") as folder:
        appliance, ours, our_backends = _arm(catalog, base, family, Path(folder) / "appliance.duckdb", "appliance")
        baseline, theirs, their_backends = _arm(
            catalog, sequential, family, Path(folder) / "baseline.duckdb", "single-slot"
        )
        cold = (
            _arm(catalog, sequential, family, Path(folder) / "stateless.duckdb", "stateless")[0] if stateless else None
        )
    served = [item for recorder in our_backends for item in recorder.served]
    served_baseline = [item for recorder in their_backends for item in recorder.served]
    workload = count_workload(our_backends)
    distinct = sum(workload.distinct_prompt_tokens.values())
    differing = count_differing(ours, theirs)
    requests_differing = count_differing(served, served_baseline)
    unmatched = (Counter(served) - Counter(served_baseline)).elements()
    by_kind = Counter(f"{model}/{'scoring' if len(outcome) == 2 else 'generation'}" for model, _, outcome in unmatched)
    return EndToEndResult(
        conversations=conversations,
        turns=turns,
        players=[player],
        panel=list(panel.judges),
        appliance=appliance,
        baseline=baseline,
        stateless=cold,
        speedup=baseline.wall_s / appliance.wall_s if appliance.wall_s else 0.0,
        speedup_vs_stateless=cold.wall_s / appliance.wall_s if cold is not None and appliance.wall_s else None,
        transcripts_identical=differing == 0,
        messages_compared=len(ours),
        messages_differing=differing,
        tokens_identical=requests_differing == 0,
        requests_compared=len(served),
        requests_differing=requests_differing,
        differing_by_kind=dict(by_kind),
        workload=workload,
        prefill_ratio=appliance.prefill_tokens / distinct if distinct else None,
        message_texts=_message_texts(ours),
    )


def markdown_lines(e2e: EndToEndResult) -> list[str]:
    """The end-to-end table: each arm's time, tokens and where its time went; then what comparing the arms found."""
    return _arms_table(e2e) + _comparisons(e2e)


def _arms_table(e2e: EndToEndResult) -> list[str]:
    arms = [("appliance", e2e.appliance), ("sequential, single-slot prefix reuse (baseline)", e2e.baseline)]
    if e2e.stateless is not None:
        arms.append(("sequential, nothing reused", e2e.stateless))
    if e2e.plain is not None:
        arms.append(("plain driver: each phase one batch, no scheduler or store", e2e.plain))
    if e2e.llama_cpp is not None:
        arms.append(("the appliance on llama.cpp, the same GGUFs in every role", e2e.llama_cpp))
    return [
        f"## End to end: PingPong, {e2e.conversations} conversations x {e2e.turns} turns, judges {e2e.panel}",
        "",
        "| arm | wall s | prefill tokens | cached prompt tokens | recomputed cached | decode tokens | prefill s "
        "| decode s | sampling s | other s | peak RSS MB | RSS at start MB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *[
            f"| {name} | {arm.wall_s:.1f} | {arm.prefill_tokens} | {arm.cached_prompt_tokens} | "
            f"{arm.recomputed_cached_tokens} | {arm.decode_tokens} | {arm.prefill_s:.1f} | {arm.decode_s:.1f} | "
            f"{arm.sample_s:.1f} | {arm.wall_s - arm.prefill_s - arm.decode_s - arm.sample_s:.1f} | "
            f"{arm.peak_rss_mb:.0f} | {arm.start_rss_mb:.0f} |"
            for name, arm in arms
        ],
        "",
        "Prefill, decode and sampling seconds are spent inside llama.cpp (llama.cpp backends only); other = the "
        "scheduler, the episodes, the store and Python. The arms run one after another in one process: peak RSS "
        "is the process's highest resident memory during the arm (the kernel's mark reset as it began), on top "
        "of what it held at the start.",
        "",
    ]


def _comparisons(e2e: EndToEndResult) -> list[str]:
    cold = f"; {e2e.speedup_vs_stateless:.2f}x against nothing reused" if e2e.speedup_vs_stateless else ""
    return [
        *(
            [
                f"The appliance prefilled {e2e.appliance.prefill_tokens} tokens for "
                f"{sum(e2e.workload.distinct_prompt_tokens.values())} distinct prompt tokens: "
                f"{e2e.prefill_ratio:.2f}x. Caches copied back from host memory served "
                f"{e2e.appliance.restored_tokens} prompt tokens ({e2e.appliance.saved_caches} caches saved, "
                f"peak {e2e.appliance.host_cache_peak_mb:.0f} MB); {e2e.appliance.evicted_tokens} prefill-computed "
                "tokens were lost when caches were overwritten.",
                "",
            ]
            if e2e.prefill_ratio is not None
            else []
        ),
        f"Speedup {e2e.speedup:.2f}x against the single-slot baseline{cold}. At temperature 0, every request's "
        f"generated token ids (or log-probabilities) equal the baseline's: {e2e.tokens_identical} "
        f"({e2e.requests_compared} requests; {e2e.requests_differing} of either arm's without an identical one in "
        "the other"
        + (f": {', '.join(f'{k} {v}' for k, v in e2e.differing_by_kind.items())}" if e2e.differing_by_kind else "")
        + "); stored texts and verdicts: "
        f"{e2e.transcripts_identical} ({e2e.messages_compared} texts; {e2e.messages_differing} of either arm's "
        "without an identical one in the other).",
        "",
        *(
            [
                f"Against the plain driver: {e2e.speedup_vs_plain:.2f}x; messages of either arm without an "
                f"identical one in the other: {e2e.plain_messages_differing} (of {len(e2e.message_texts)} each).",
                "",
            ]
            if e2e.plain is not None and e2e.speedup_vs_plain is not None
            else []
        ),
        *(
            [
                f"Against the appliance on llama.cpp: {e2e.speedup_vs_llama_cpp:.2f}x; messages of either arm "
                f"without an identical one in the other: {e2e.llama_cpp_messages_differing} (of "
                f"{len(e2e.message_texts)} each; llama.cpp computes on the quantised weights, vLLM on their "
                "dequantised copy, so greedy replies part).",
                "",
            ]
            if e2e.llama_cpp is not None and e2e.speedup_vs_llama_cpp is not None
            else []
        ),
    ]
