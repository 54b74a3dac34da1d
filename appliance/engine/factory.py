"""Opening the right backend for a catalog entry: the opener its backend's declaration names.

Adapter entries whose backend hosts adapters (transformers, vllm) do not get a backend each: the
entries of one base share one backend opened for the base with all of them (`adapter_hosts`), and
each request names its adapter, so sequences of different adapters decode in one batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import cast

from appliance.catalog.backends import backend_opener, hosts_adapters
from appliance.catalog.models import Catalog, ModelSpec
from appliance.engine.backend import Backend


def open_backend(catalog: Catalog, spec: ModelSpec, *, parallel: int) -> Backend:
    """Load the model of `spec`; `parallel` bounds how many sequences are worth a slot."""
    return cast(Backend, backend_opener(spec.backend)(catalog, spec, parallel))


def open_adapter_host(catalog: Catalog, base: ModelSpec, adapters: Sequence[ModelSpec], *, parallel: int) -> Backend:
    """One backend for `base` and every entry of `adapters` (LoRAs of it): a request for an adapter
    carries the adapter's entry name (`GenerationRequest.adapter`), one without plays the base."""
    return cast(Backend, backend_opener(base.backend)(catalog, base, parallel, adapters=adapters))


def hosted_adapters(
    catalog: Catalog, spec: ModelSpec, adapters: Sequence[ModelSpec]
) -> tuple[dict[str, tuple[Path, float]], str | None]:
    """What a backend that hosts adapters serves when opened for `spec`: each adapter's file or folder
    and scale by entry name, and the one a request naming none plays. Opened for a base: `adapters`,
    and the base by default; opened for an adapter entry alone (`models check`, the bench): that one."""
    served = [spec] if spec.adapter is not None else list(adapters)
    files: dict[str, tuple[Path, float]] = {}
    for entry in served:
        adapter = catalog.resolve_adapter(entry)
        assert adapter is not None  # an entry with a base has an adapter (catalog.adapter_specs)
        files[entry.name] = (adapter, entry.adapter_scale)
    return files, spec.name if spec.adapter is not None else None


def adapter_hosts(catalog: Catalog, names: Iterable[str]) -> dict[str, list[ModelSpec]]:
    """The adapter entries among `names` that share their base's backend, by base name, in order."""
    hosted: dict[str, list[ModelSpec]] = {}
    for name in dict.fromkeys(names):
        spec = catalog.get(name)
        if spec.base is not None and hosts_adapters(spec.backend):
            hosted.setdefault(spec.base, []).append(spec)
    return hosted
