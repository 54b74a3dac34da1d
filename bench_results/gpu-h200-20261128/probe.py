"""GPU probes (issue 33): which shapes crash llama.cpp's CUDA build, and where fast mode's decode gap goes."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from statistics import median

import llama_cpp as C

from appliance.bench.decode import engine_decode
from appliance.bench.prompts import bench_prompts
from appliance.bench.raw_loop import raw_batched_decode
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.llama_native import LlamaModel

GPU = int(os.environ.get("PROBE_GPU", "-1"))
CALLS: list[tuple[int, float]] = []
_decode = C.llama_decode


def timed_decode(context, batch):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    status = _decode(context, batch)
    C.llama_synchronize(context)
    CALLS.append((int(batch.n_tokens), time.perf_counter() - started))
    return status


def smoke(path: str) -> None:
    """Load with every layer offloaded; bare loop at 1 and 16 sequences; the engine (exact) at 4."""
    model = LlamaModel(Path(path), "probe", GPU)
    tokens = [model.tokenize(p, parse_special=True) for p in bench_prompts(16, 0)]
    for count, unified in ((1, False), (16, False), (16, True)):
        t = raw_batched_decode(model, tokens[:count], 8, context_length=512, kv_unified=unified)
        print(f"  bare loop {count} seq unified={unified}: {t.tokens_per_s:.0f} tok/s", flush=True)
    backend = LlamaCppBackend(Path(path), name="probe", context_length=512, slots=4, gpu_layers=GPU)
    t = engine_decode(backend, bench_prompts(4, 0), 8)
    print(f"  engine exact 4 seq: {t.tokens_per_s:.0f} tok/s", flush=True)
    backend.close()


def arm(name: str, run) -> dict:  # type: ignore[no-untyped-def]
    rows = []
    for _ in range(3):
        CALLS.clear()
        started = time.perf_counter()
        timing = run()
        wall = time.perf_counter() - started
        steps = [s for n, s in CALLS if n == SEQ]
        rows.append(
            dict(
                wall=wall,
                tok_s=timing.tokens_per_s,
                calls=len(CALLS),
                in_decode=sum(s for _, s in CALLS),
                prefill=sum(s for n, s in CALLS if n != SEQ),
                steps=len(steps),
                step_ms=1000 * median(steps) if steps else 0.0,
                sizes=sorted({n for n, _ in CALLS if n != SEQ})[:12],
            )
        )
    best = sorted(rows, key=lambda r: r["wall"])[1]
    best["host"] = best["wall"] - best["in_decode"]
    print(
        f"{name:<28} {best['tok_s']:7.0f} tok/s wall {best['wall'] * 1000:6.0f} ms  "
        f"in llama_decode {best['in_decode'] * 1000:6.0f} "
        f"(prefill calls {best['prefill'] * 1000:5.0f})  host {best['host'] * 1000:5.0f}  calls {best['calls']:3d}  "
        f"step median {best['step_ms']:.2f} ms  prefill call sizes {best['sizes']}",
        flush=True,
    )
    return {"arm": name, **best}


def gap(path: str, out: str) -> None:
    """Exact, fast and the bare loop at SEQ sequences, every llama_decode call timed (synchronised)."""
    C.llama_decode = timed_decode
    model = LlamaModel.shared(Path(path), "probe", GPU)
    prompts = bench_prompts(SEQ, 0)
    tokens = [model.tokenize(p, parse_special=True) for p in prompts]
    results = []
    for unified in (True, False):
        results.append(
            arm(
                f"bare unified={unified}",
                lambda unified=unified: raw_batched_decode(model, tokens, 64, context_length=2048, kv_unified=unified),
            )
        )
    for mode, unified in (("fast", True), ("fast", False), ("exact", False)):
        backend = LlamaCppBackend(
            Path(path),
            name="probe",
            context_length=2048,
            slots=SEQ,
            gpu_layers=GPU,
            exact_kv=mode == "exact",
            kv_unified=unified,
        )

        def run(backend: LlamaCppBackend = backend):  # type: ignore[no-untyped-def]
            backend.forget_caches()
            return engine_decode(backend, prompts, 64)

        results.append(arm(f"engine {mode} unified={unified}", run))
        backend.close()
    Path(out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    if sys.argv[1] == "smoke":
        smoke(sys.argv[2])
    else:
        SEQ = int(sys.argv[3])
        gap(sys.argv[2], sys.argv[4])
