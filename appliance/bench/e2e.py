"""Workload 2: a PingPong run by the appliance against a sequential stateless baseline.

The baseline is how peer harnesses drive a local model: one request at a
time, the whole history sent again every turn, nothing cached. Both arms use
the same models, sampling, seeds and instances, greedy decoding, and a
temporary store each; their transcripts are compared message by message.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

from appliance.catalog import Catalog, ModelSpec
from appliance.engine.backend import Backend
from appliance.engine.factory import open_backend
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.judging.panels import Panel
from appliance.runner import RunConfig, Runner
from appliance.scenarios.base import ScenarioFamily
from appliance.store import Store


class ArmResult(BaseModel):
    wall_s: float
    episodes: int
    episodes_per_hour: float
    prefill_tokens: int
    cached_prompt_tokens: int
    decode_tokens: int
    peak_kv_cells: int


class EndToEndResult(BaseModel):
    conversations: int
    turns: int
    players: list[str]
    panel: list[str]
    appliance: ArmResult
    baseline: ArmResult
    speedup: float
    transcripts_identical: bool
    messages_compared: int
    messages_differing: int


def stateless_backend(catalog: Catalog, spec: ModelSpec, *, parallel: int) -> Backend:
    """One sequence, no cache reuse: every request is prefilled from scratch."""
    if spec.backend == "transformers":
        from appliance.engine.transformers_backend import transformers_backend_for

        return transformers_backend_for(catalog, spec, slots=1, reuse_cache=False)
    return LlamaCppBackend(
        catalog.resolve_path(spec),
        name=spec.name,
        chat_format=spec.chat_format,
        context_length=spec.context_length,
        slots=1,
        threads=spec.threads,
        reuse_cache=False,
    )


def _arm(
    catalog: Catalog, config: RunConfig, family: ScenarioFamily, db: Path, stateless: bool
) -> tuple[ArmResult, list[tuple[str, int, str]]]:
    counters: list[Backend] = []

    def factory(catalog: Catalog, spec: ModelSpec, *, parallel: int) -> Backend:
        make = stateless_backend if stateless else open_backend
        backend = make(catalog, spec, parallel=parallel)
        counters.append(backend)
        return backend

    with Store.open(db) as store:
        started = time.perf_counter()
        summary = Runner(catalog, store, backend_factory=factory).execute(config, [family])
        wall = time.perf_counter() - started
        rows = store.query(
            "SELECT split_part(episode_id, ':', 3) || ':' || split_part(episode_id, ':', 4), idx, text "
            "FROM messages ORDER BY 1, 2"
        )
        verdicts = store.query(
            "SELECT split_part(episode_id, ':', 3) || ':' || split_part(episode_id, ':', 4), target_idx, "
            "judge || '/' || raw_text FROM judgments WHERE criterion = 'refusal' ORDER BY 1, 2, 3"
        )
    transcript = [(str(a), int(b), str(c)) for a, b, c in rows] + [
        (f"{a}/verdict", int(b), str(c)) for a, b, c in verdicts
    ]
    episodes = summary.episodes_finished
    return (
        ArmResult(
            wall_s=wall,
            episodes=episodes,
            episodes_per_hour=episodes * 3600 / wall if wall else 0.0,
            prefill_tokens=summary.prompt_tokens - summary.cached_prompt_tokens,
            cached_prompt_tokens=summary.cached_prompt_tokens,
            decode_tokens=summary.completion_tokens,
            peak_kv_cells=max((b.counters.peak_kv_cells for b in counters), default=0),
        ),
        transcript,
    )


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
) -> EndToEndResult:
    base = RunConfig(
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
    with tempfile.TemporaryDirectory(prefix="appliance-bench-") as folder:
        appliance, ours = _arm(catalog, base, family, Path(folder) / "appliance.duckdb", stateless=False)
        sequential = base.model_copy(update={"parallel": 1})
        baseline, theirs = _arm(catalog, sequential, family, Path(folder) / "baseline.duckdb", stateless=True)
    differing = sum(1 for a, b in zip(ours, theirs, strict=False) if a != b) + abs(len(ours) - len(theirs))
    return EndToEndResult(
        conversations=conversations,
        turns=turns,
        players=[player],
        panel=list(panel.judges),
        appliance=appliance,
        baseline=baseline,
        speedup=baseline.wall_s / appliance.wall_s if appliance.wall_s else 0.0,
        transcripts_identical=differing == 0,
        messages_compared=len(ours),
        messages_differing=differing,
    )
