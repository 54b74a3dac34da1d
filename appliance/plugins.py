"""Finding the modules that register themselves (families, clembench games, backends)."""

from __future__ import annotations

import importlib
import pkgutil


def import_submodules(package: str, *, packages_only: bool = False, suffix: str = "") -> None:
    """Import every direct submodule of `package` (only subpackages, or only names ending in `suffix`)."""
    parent = importlib.import_module(package)
    for module in pkgutil.iter_modules(parent.__path__):
        if (module.ispkg or not packages_only) and module.name.endswith(suffix):
            importlib.import_module(f"{package}.{module.name}")
