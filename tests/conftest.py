"""Shared fixtures. Real-model fixtures load the embedded SmolLM2 GGUF once per session."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from appliance.catalog.models import load_catalog

if TYPE_CHECKING:  # imported in the fixture: loading llama.cpp loads its OpenMP runtime, which must
    # start after `pytest_configure` has set this worker's cores and OMP_NUM_THREADS
    from appliance.engine.llama_cpp_backend import LlamaCppBackend

REPO = Path(__file__).resolve().parent.parent
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


def pytest_configure(config: pytest.Config) -> None:
    """Each worker's cores first (`_keep_to_own_cores`), then llama.cpp before any test module imports
    the store and with it duckdb: a CUDA build cannot load a model in a process that loaded duckdb first
    (`appliance/engine/load_order.py`)."""
    _keep_to_own_cores()
    from appliance.engine.load_order import load_llama_first

    load_llama_first()


def _keep_to_own_cores() -> None:
    """`make test` runs one pytest-xdist worker per core; each worker keeps to its own cores. llama.cpp
    (`default_threads`), torch's OpenMP and vLLM size their thread pools by the cores a process may use,
    and two spinning pools on one core stall each other. The CLI subprocesses a test starts inherit it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if not worker or workers < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < workers:
        return
    mine = cores[int(worker.removeprefix("gw")) :: workers]
    os.sched_setaffinity(0, mine)
    os.environ["OMP_NUM_THREADS"] = str(len(mine))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep file-hash caches out of the user's home; assembled models stay shared."""
    monkeypatch.setenv("APPLIANCE_DB", str(tmp_path_factory.getbasetemp() / "default.duckdb"))


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    catalog = load_catalog(REPO / "models.toml")
    path = catalog.resolve_path(catalog.get("smollm2-135m"))
    assert path.is_file(), f"embedded SmolLM2 GGUF missing at {path}"
    return path


@pytest.fixture(scope="session")
def smollm2(smollm2_path: Path) -> Iterator[LlamaCppBackend]:
    from appliance.engine.llama_cpp_backend import LlamaCppBackend

    backend = LlamaCppBackend(smollm2_path, name="smollm2-135m", context_length=1024, slots=4)
    yield backend
    backend.close()


@pytest.fixture
def checked_store(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Paths for stores that several processes write; when the test ends, `appliance store check` must find each
    one holding exactly what its journal does, so a lost write fails the test that lost it."""
    from appliance.store.repair import check_store

    made: list[Path] = []

    def path(name: str) -> Path:
        made.append(tmp_path / name)
        return made[-1]

    yield path
    for db in made:
        if db.exists():
            report = check_store(db)
            assert report.ok, [run.describe() for run in report.runs if not run.ok] + report.other_problems
