"""Shards: a deterministic 1/N of a run's plan, for clusters scheduled without Ray (Slurm job arrays).

Every shard plans the whole run as the unsharded run would, then plays only its own episodes. What
is dealt is a lineage, not an episode: the episodes of one instance (every pairing) and of the later
stages that read it (SimulBench's dialogue from its collection to the comparison of the answers to
its scripts; a DeepEval task across its waves) stay in one shard, so a stage that builds on stored
episodes finds them all in its own store. Lineages are dealt round-robin in an order fixed by their
hashes, so shards get near-equal numbers of them whatever the names; `appliance merge` then joins
the shards' stores into one run.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from appliance.errors import ApplianceError

_SHARD = re.compile(r"(\d+)/(\d+)")


@dataclass(frozen=True)
class Shard:
    """Shard `index` (1-based) of `count`."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        match = _SHARD.fullmatch(text.strip())
        if match is None:
            raise ApplianceError(f"--shard {text}: expected I/N, e.g. 1/4")
        index, count = int(match[1]), int(match[2])
        if not 1 <= index <= count:
            raise ApplianceError(f"--shard {text}: I must be between 1 and N")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def _order(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ShardDeal:
    """Which shard plays each lineage: the lineages of the run's first stages dealt round-robin; a lineage
    that appears only later (none does in the shipped families) goes by its hash."""

    def __init__(self, shard: Shard, first_lineages: Iterable[str]) -> None:
        self.shard = shard
        dealt = sorted(set(first_lineages), key=_order)
        self._owner = {key: position % shard.count for position, key in enumerate(dealt)}

    def keeps(self, lineage: str) -> bool:
        owner = self._owner.get(lineage)
        if owner is None:
            owner = int(_order(lineage), 16) % self.shard.count
        return owner == self.shard.index - 1
