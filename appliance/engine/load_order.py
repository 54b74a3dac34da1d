"""llama.cpp's libraries before duckdb's, in a process that will load a model.

A CUDA build of llama-cpp-python 0.3.36 segfaults loading any model (in `llama_model_load_from_file`)
in a process that imported duckdb first, and loads it fine when llama_cpp came first (an H200,
2026-11-28: `bench_results/gpu-h200-20261128.md`). The store imports duckdb knowing nothing of engines, so
that reading a run loads no engine; what is about to load models calls `load_llama_first` before it
imports the store: the CLI for every command that may load one (`cli/main.py`), and the package's lazy
exports for the names that load models (`appliance/__init__.py`). The CPU build is unaffected and pays
about 0.1 s.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence

#: commands that only read stores, files and the registry: they never load a model, so never llama.cpp
READING_COMMANDS = frozenset({"report", "export", "compare", "view", "merge", "store", "labels", "scenarios", "import"})


def load_llama_first() -> None:
    """Import llama_cpp now, unless duckdb is loaded already (then it is too late, and nothing is gained)
    or llama-cpp-python is not installed."""
    if "llama_cpp" not in sys.modules and "duckdb" not in sys.modules and importlib.util.find_spec("llama_cpp"):
        import llama_cpp  # noqa: F401  (loaded for its side effect: its libraries before duckdb's)


def load_llama_first_for(arguments: Sequence[str]) -> None:
    """The CLI's call: llama.cpp first unless the command (the first argument) only reads."""
    command = next((argument for argument in arguments if not argument.startswith("-")), None)
    if command not in READING_COMMANDS:
        load_llama_first()
