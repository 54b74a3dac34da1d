"""duckdb, imported only after llama.cpp's libraries are loaded.

A CUDA build of llama-cpp-python 0.3.36 segfaults loading any model (in `llama_model_load_from_file`)
in a process that imported duckdb first, and loads it fine when llama_cpp came first (an H200,
2026-11-28: `bench_results/gpu-h200-20261128.md`). Every run holds the store open before it loads a
model, so the store takes duckdb from here; the CPU build is unaffected and pays about 0.1 s.
"""

import llama_cpp  # noqa: F401  (loaded for its side effect: its libraries before duckdb's)

# isort: split
import duckdb

__all__ = ["duckdb"]
