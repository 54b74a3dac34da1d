"""duckdb, imported in this one module of the store.

The store knows nothing of engines: a command that only reads a run loads no engine library. Where a
process will load a model, llama.cpp's libraries must come before duckdb's on a CUDA build; that is
`appliance/engine/load_order.py`'s job, done before the store is imported.
"""

import duckdb

__all__ = ["duckdb"]
