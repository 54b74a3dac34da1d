"""A scenario as a run names it: `NAME` (the family's own data) or `NAME:SOURCE` (a folder, a file
or a stored set). Parsed here and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScenarioSpec:
    #: the registered family
    name: str
    #: what it reads instead of its own data ("" for its own data)
    source: str = ""

    @classmethod
    def parse(cls, spec: str) -> ScenarioSpec:
        name, _, source = spec.partition(":")
        return cls(name, source)


def family_of(spec: str) -> str:
    """The registered family of a spec, a stage name or a stored episode's scenario."""
    return ScenarioSpec.parse(spec).name
