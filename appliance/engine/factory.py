"""Opening the right backend for a catalog entry: the backend registered under its name."""

from __future__ import annotations

from appliance.catalog import Catalog, ModelSpec
from appliance.engine.backend import Backend
from appliance.engine.registry import backend_opener


def open_backend(catalog: Catalog, spec: ModelSpec, *, parallel: int) -> Backend:
    """Load the model of `spec`; `parallel` bounds how many sequences are worth a slot."""
    return backend_opener(spec.backend)(catalog, spec, parallel)
