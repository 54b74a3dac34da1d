"""The numbers a calibration works on: per item, every judge's score and the human labels.

Tables are column arrays over items (NaN where a judge's verdict did not
parse or an annotator gave no number) so that metrics and bootstrap
resampling are plain numpy indexing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import numpy as np


def split_items(item_ids: list[str], seed: int, heldout_fraction: float) -> tuple[list[str], list[str]]:
    """A seeded split into (fit, held-out); both parts are non-empty when there are two items or more."""
    if not 0.0 < heldout_fraction < 1.0:
        raise ValueError("heldout_fraction must be between 0 and 1")
    shuffled = sorted(item_ids)
    random.Random(seed).shuffle(shuffled)
    held = min(max(1, round(len(shuffled) * heldout_fraction)), max(len(shuffled) - 1, 0))
    return sorted(shuffled[held:]), sorted(shuffled[:held])


def majority(values: np.ndarray) -> float:
    """The most frequent pairwise label; 0 (tie) when no label has the most votes alone or none is given."""
    present = values[np.isfinite(values)]
    if present.size == 0:
        return float("nan")
    labels, counts = np.unique(present, return_counts=True)
    top = counts == counts.max()
    return float(labels[top][0]) if top.sum() == 1 else 0.0


@dataclass(frozen=True)
class ItemTable:
    """Judge scores and human labels of the same items, row i = item_ids[i].

    Rating sets: `judges[j]` is judge j's score on its own scale, `human` the
    mean over annotators. Pairwise sets: `judges[j]` is the verdict with the
    first response shown as A and `swapped[j]` the verdict with it shown as
    B, both as +1 (first better), -1 or 0; `human` is the annotators' majority.
    """

    item_ids: tuple[str, ...]
    judges: dict[str, np.ndarray]
    human: np.ndarray
    annotators: dict[str, np.ndarray]
    #: a length-only predictor: response length (ratings) or sign of the length difference (pairs)
    length: np.ndarray
    swapped: dict[str, np.ndarray] | None = None
    #: a probability-reading judge's features: judge -> feature -> column
    features: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    #: items with the same label share a context and are resampled together (None: all independent)
    clusters: np.ndarray | None = None

    def subset(self, ids: list[str]) -> ItemTable:
        position = {item: index for index, item in enumerate(self.item_ids)}
        rows = np.asarray([position[item] for item in ids], dtype=int)
        return self.take(rows)

    def take(self, rows: np.ndarray) -> ItemTable:
        return replace(
            self,
            item_ids=tuple(self.item_ids[i] for i in rows),
            judges={j: v[rows] for j, v in self.judges.items()},
            human=self.human[rows],
            annotators={a: v[rows] for a, v in self.annotators.items()},
            length=self.length[rows],
            swapped=None if self.swapped is None else {j: v[rows] for j, v in self.swapped.items()},
            features={j: {f: v[rows] for f, v in columns.items()} for j, columns in self.features.items()},
            clusters=None if self.clusters is None else self.clusters[rows],
        )

    def __len__(self) -> int:
        return len(self.item_ids)

    def annotator_range(self) -> tuple[float, float]:
        """The lowest and highest value any annotator gave on these items (the human scale of a fit)."""
        values = np.concatenate([v[np.isfinite(v)] for v in self.annotators.values()])
        return float(values.min()), float(values.max())

    def others_means(self) -> dict[str, np.ndarray]:
        """Per annotator, the mean of the other annotators on each item (NaN where none rated it)."""
        means: dict[str, np.ndarray] = {}
        for annotator in self.annotators:
            rest = [v for a, v in self.annotators.items() if a != annotator]
            if not rest:  # a single annotator: no other to compare with
                means[annotator] = np.full(len(self), np.nan)
                continue
            others = np.vstack(rest)
            counts = np.isfinite(others).sum(axis=0)
            with np.errstate(invalid="ignore"):
                means[annotator] = np.where(counts > 0, np.nansum(others, axis=0) / np.maximum(counts, 1), np.nan)
        return means

    def pair_outcomes(self, judge: str) -> np.ndarray:
        """+1 / -1 where both orders agree, 0 for a tie or an inconsistent pair, NaN if either is unparsed."""
        assert self.swapped is not None
        original, swapped = self.judges[judge], self.swapped[judge]
        agreed = np.where(original == swapped, original, 0.0)
        return np.where(np.isfinite(original) & np.isfinite(swapped), agreed, np.nan)
