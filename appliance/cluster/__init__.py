"""Playing a run's episodes on a Ray cluster (`appliance run --ray`): the one-process runner never imports it.

A worker is a fresh process that imports this package before the store: llama.cpp is loaded first here
(`engine/load_order.py`), as the CLI does for its own process."""

from appliance.engine.load_order import load_llama_first

load_llama_first()
