"""Where the project's data folders are: scenarios/, judges/ and models.toml.

A source checkout (the normal install, `pip install -e .`) keeps them beside
the package. APPLIANCE_HOME points elsewhere, e.g. at a lab's own copy.
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    configured = os.environ.get("APPLIANCE_HOME")
    if configured:
        return Path(configured)
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "scenarios").is_dir():
        return checkout
    return Path.cwd()


def scenarios_dir() -> Path:
    return project_root() / "scenarios"


def judges_dir() -> Path:
    return project_root() / "judges"


def default_models_file() -> Path:
    """models.toml of the working directory if there is one, else the project's."""
    local = Path("models.toml")
    return local if local.is_file() else project_root() / "models.toml"


def staging_path(target: Path) -> Path:
    """Where this process builds `target` before moving it into place: beside it (one filesystem, so
    the move is a rename or a link) and its own, so parallel processes building the same file (a cache
    entry, a new store) never write into each other's copy."""
    return target.with_name(f"{target.name}.partial-{os.getpid()}")
