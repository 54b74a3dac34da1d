"""A label set: items with the texts a judge needs, and every annotator's value per criterion.

Kinds decide which judge template rates the items:
- `turn`: a dialogue context and one response (`context`, `response`, optional `persona`);
- `dialogue`: a whole conversation (`dialogue`);
- `pairwise`: an instruction with two responses (`instruction`, `input`, `response_a`, `response_b`);
  values are +1 (A better), -1 (B better) or 0 (tie).
A missing or non-numeric human value is kept as None with its raw text, never as zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

LabelKind = Literal["turn", "dialogue", "pairwise"]
KINDS: tuple[LabelKind, ...] = ("turn", "dialogue", "pairwise")
PAIRWISE_CRITERION = "preference"


@dataclass(frozen=True)
class LabelItem:
    item_id: str
    texts: dict[str, str]
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HumanLabel:
    item_id: str
    annotator: str
    criterion: str
    value: float | None
    raw_value: str


@dataclass
class LabelSet:
    name: str
    kind: LabelKind
    format: str
    source: str
    items: list[LabelItem]
    labels: list[HumanLabel]
    #: criterion -> (lowest, highest) value seen or declared
    scales: dict[str, tuple[float, float]] = field(default_factory=dict)

    def criteria(self) -> list[str]:
        return sorted({label.criterion for label in self.labels})

    def annotators(self) -> list[str]:
        return sorted({label.annotator for label in self.labels})

    def fill_scales(self) -> None:
        """Scales not declared by the format are the observed range."""
        for criterion in self.criteria():
            if criterion in self.scales:
                continue
            values = [x.value for x in self.labels if x.criterion == criterion and x.value is not None]
            if values:
                self.scales[criterion] = (min(values), max(values))
