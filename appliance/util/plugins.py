"""Self-registration, shared by families, clembench games and backends.

Each kind keeps a `Registry`: modules add their items when they are imported,
and the registry imports those modules (its `discover` function) the first
time anything asks it for an item.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Generic, TypeVar

from appliance.errors import ApplianceError

T = TypeVar("T")


def import_submodules(package: str, *, packages_only: bool = False, suffix: str = "") -> None:
    """Import every direct submodule of `package` (only subpackages, or only names ending in `suffix`)."""
    parent = importlib.import_module(package)
    for module in pkgutil.iter_modules(parent.__path__):
        if (module.ispkg or not packages_only) and module.name.endswith(suffix):
            importlib.import_module(f"{package}.{module.name}")


class Registry(Generic[T]):
    """Names -> what modules registered under them."""

    def __init__(self, what: str, discover: Callable[[], None]) -> None:
        self.what = what
        #: as registered so far, without discovery (tests patch it)
        self.entries: dict[str, T] = {}
        self._discover = discover
        self._discovered = False

    def add(self, name: str, item: T) -> T:
        """Register `item`; another item under a taken name is an error (the same one again is not)."""
        known = self.entries.get(name)
        if known is not None and known is not item:
            raise ApplianceError(f"{self.what} '{name}' is registered twice")
        self.entries[name] = item
        return item

    def known(self) -> dict[str, T]:
        """Everything registered, once every registering module has been imported."""
        if not self._discovered:
            self._discovered = True  # set first: the modules being imported register into this registry
            self._discover()
        return self.entries

    def get(self, name: str, unknown: str = "") -> T:
        """The item under `name`; a clear error naming what is known otherwise."""
        item = self.known().get(name)
        if item is None:
            message = unknown or f"unknown {self.what} '{name}'"
            raise ApplianceError(f"{message} (known: {', '.join(sorted(self.entries))})")
        return item
