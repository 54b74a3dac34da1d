"""`make test` runs one pytest-xdist worker per core (see `pytest_configure` in conftest.py)."""

from __future__ import annotations

import os


def test_torch_keeps_one_thread_per_core_this_process_may_use() -> None:
    """OpenMP reads OMP_NUM_THREADS once, when the first library that links it loads (llama.cpp does).
    Loaded before a worker is given its core, it keeps a thread per machine core on one core, and the
    torch and vLLM tests ran 8 to 20 times slower (one vLLM test: 28 s alone, 540 s in a worker)."""
    import torch

    assert torch.get_num_threads() == len(os.sched_getaffinity(0))
