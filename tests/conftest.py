"""Shared fixtures. Real-model fixtures load the embedded SmolLM2 GGUF once per session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.catalog import load_catalog
from appliance.engine.llama_cpp_backend import LlamaCppBackend

REPO = Path(__file__).resolve().parent.parent
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


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
    backend = LlamaCppBackend(smollm2_path, name="smollm2-135m", context_length=1024, slots=4, threads=os.cpu_count())
    yield backend
    backend.close()
