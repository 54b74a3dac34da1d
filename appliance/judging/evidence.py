"""What stands behind a judged figure: the calibration that mapped it, and whether the judge told the players apart.

A figure made from a panel's verdicts is only as good as its evidence. Each judged headline figure of
a run gets two facts, computed the same way for every family:

- its calibration: the stored calibration its scores were mapped with (label set, criterion, held-out
  agreement with its interval), or "uncalibrated" where none was;
- its separation, on the run itself: the spread between the players' means against the spreads the
  same values give with the players' labels shuffled 1,000 times (within each item where the players
  share items, so an item's difficulty is not taken for a player's; across all units otherwise): a
  panel that rates everyone alike, or at random, reaches its own spread in many shuffles. Beside it,
  the share of items on which every player got the same value (ties), and how well two random
  halves of the items agree on the players' order (split-half reliability, three players or more).

Where more than 5% of the shuffles reach the observed spread, the figure does not rank the players,
and the report, the page and `compare` say so in one line. Where the units are too few for any
arrangement to stand out (two players with three units each), nothing is claimed either way. Tiny
judges are expected to be blind on some tasks; the failure would be hiding it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from statistics import fmean
from typing import Any

import numpy as np
from pydantic import BaseModel

from appliance.headline import Headline, HeadlineMetric, Unit
from appliance.store.run_view import RunView
from appliance.util.agreement import spearman

#: shuffles of the players' labels that make the noise
SHUFFLES = 1000
#: random halvings for the split-half reliability
HALVINGS = 50
#: the noise shown is this quantile of the shuffled spreads
NOISE_QUANTILE = 0.95
#: a figure separates the players where at most this share of shuffles reaches its spread
ALPHA = 0.05


class Separation(BaseModel):
    """Whether a judged figure told a run's players apart."""

    players: int
    #: units (item and player) that carry the figure
    units: int
    #: the best player's mean minus the worst's
    spread: float | None = None
    #: the 95th percentile of that spread with the players' labels shuffled
    noise: float | None = None
    #: the share of shuffles whose spread reaches the observed one (with the observed arrangement counted)
    p_value: float | None = None
    #: how the labels were shuffled: "within items" (players share items: a hard item is hard for all)
    #: or "across all units"
    shuffled: str | None = None
    #: share of items played by two players or more on which every player got the same value
    ties: float | None = None
    #: Spearman between the players' means on two random halves of the items, averaged (three players or more)
    split_half: float | None = None
    #: None where it cannot be measured (one player, or too few units for any arrangement to stand out)
    separated: bool | None = None

    def blind_line(self, figure: str, who: str = "these players") -> str | None:
        """The one line a report prints when the figure does not rank `who` (None when it does)."""
        if self.separated is not False:
            return None
        ties = f", ties {self.ties:.0%}" if self.ties is not None else ""
        return (
            f"{figure}: the panel did not separate {who} (spread {self.spread:.3g}, noise {self.noise:.3g}, "
            f"p {self.p_value:.2f}{ties}); this figure does not rank them"
        )


class FigureEvidence(BaseModel):
    """A judged figure's calibration and separation."""

    #: "family.metric"
    figure: str
    description: str
    #: the stored score metric the figure is made of
    judged_by: str
    #: the panel whose verdicts these are
    panel: str
    #: "calibrated on LABELS / CRITERION (ID), held-out ...", "uncalibrated", or "not judged yet"
    calibration: str
    calibration_ids: list[str]
    separation: Separation

    def lines(self) -> list[str]:
        blind = self.separation.blind_line(self.figure)
        return [
            f"{self.figure} ({self.description or self.judged_by}): {self.calibration}",
            *([blind] if blind else []),
        ]


def separation(units: Sequence[Unit], metric: HeadlineMetric, seed: int = 0) -> Separation:
    """`metric`'s separation of the players whose units these are (see the module's docstring)."""
    values: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for unit in units:
        value = metric.statistic([unit])
        if value is not None and math.isfinite(value):
            values[unit.player].append((unit.key, float(value)))
    players = sorted(values)
    counted = sum(len(v) for v in values.values())
    found = Separation(players=len(players), units=counted, ties=_ties(values))
    if len(players) < 2 or any(not v for v in values.values()):
        return found
    keys = np.array([key for p in players for key, _ in values[p]])
    labels = np.array([p for p in players for _ in values[p]])
    flat = np.array([value for p in players for _, value in values[p]])
    groups = _shuffle_groups(keys, labels)
    if _arrangements(groups, labels) * ALPHA < math.factorial(len(players)):
        return found  # no arrangement of so few units could stand out from the shuffles
    spread = _spread(flat, labels, players)
    rng = np.random.default_rng(seed)
    shuffled = np.array([_spread(flat, _shuffled(labels, groups, rng), players) for _ in range(SHUFFLES)])
    p_value = (1 + int(np.count_nonzero(shuffled >= spread - 1e-12))) / (1 + SHUFFLES)
    return found.model_copy(
        update={
            "spread": spread,
            "noise": float(np.quantile(shuffled, NOISE_QUANTILE)),
            "p_value": p_value,
            "shuffled": "within items" if len(groups) > 1 else "across all units",
            "separated": p_value <= ALPHA,
            "split_half": _split_half(values, seed) if len(players) >= 3 else None,
        }
    )


def _shuffle_groups(keys: np.ndarray, labels: np.ndarray) -> list[np.ndarray]:
    """Where most units share their item with another player's unit, labels are shuffled within each
    item (a paired design: an item's difficulty is not mistaken for a player's); else across all."""
    shared = {key for key in set(keys.tolist()) if len(set(labels[keys == key].tolist())) >= 2}
    if 2 * int(np.isin(keys, list(shared)).sum()) < len(keys):
        return [np.arange(len(keys))]
    return [np.flatnonzero(keys == key) for key in sorted(set(keys.tolist()))]


def _arrangements(groups: list[np.ndarray], labels: np.ndarray) -> float:
    """How many distinct labellings the shuffles can make (a product over the groups of multinomials)."""
    total = 1.0
    for group in groups:
        counts = np.unique(labels[group], return_counts=True)[1]
        total *= math.factorial(len(group)) / math.prod(math.factorial(int(c)) for c in counts)
    return total


def _shuffled(labels: np.ndarray, groups: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    out = labels.copy()
    for group in groups:
        out[group] = labels[rng.permutation(group)]
    return out


def _spread(values: np.ndarray, labels: np.ndarray, players: list[str]) -> float:
    means = [float(values[labels == player].mean()) for player in players]
    return max(means) - min(means)


def _ties(values: dict[str, list[tuple[str, float]]]) -> float | None:
    """Share of items scored for two players or more on which they all got the same value."""
    by_key: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for player, own in values.items():
        for key, value in own:
            by_key[key].setdefault(player, []).append(value)
    shared = [by_player for by_player in by_key.values() if len(by_player) >= 2]
    if not shared:
        return None
    return sum(len({v for vs in by_player.values() for v in vs}) == 1 for by_player in shared) / len(shared)


def _split_half(values: dict[str, list[tuple[str, float]]], seed: int) -> float | None:
    """How two random halves of the items order the players, Spearman averaged over halvings."""
    keys = sorted({key for own in values.values() for key, _ in own})
    if len(keys) < 4:
        return None
    rng = np.random.default_rng(seed + 1)
    agreements = []
    for _ in range(HALVINGS):
        half = set(rng.permutation(keys)[: len(keys) // 2].tolist())
        first, second = [], []
        for own in values.values():
            inside = [v for k, v in own if k in half]
            outside = [v for k, v in own if k not in half]
            if not inside or not outside:
                break
            first.append(fmean(inside))
            second.append(fmean(outside))
        else:
            agreed = spearman(first, second)
            agreements.append(0.0 if agreed is None else agreed)  # a half that ties every player orders nobody
    return fmean(agreements) if agreements else None


#: a judged figure with no score stored: a running or interrupted run has not reached its judging yet
NOT_JUDGED_YET = "not judged yet (no score of this figure is stored)"


def calibration_sentence(run: RunView, ids: list[str]) -> str:
    """Which calibration mapped a figure's scores, with its held-out agreement, or "uncalibrated"."""
    if not ids:
        return "uncalibrated (no stored human labels map this figure)"
    record = run.calibration(ids[-1])
    held: dict[str, Any] = record.metrics.get("panel_calibrated") or {}
    chosen = next(((n, held[n]) for n in ("spearman", "agreement", "kappa") if n in held), None)
    name, metric = chosen if chosen is not None else ("", {})
    agreement = ""
    if metric.get("value") is not None:
        ci = metric.get("ci")
        interval = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
        agreement = f", held-out {name} {metric['value']:.2f}{interval}"
    more = f" (and {len(ids) - 1} more)" if len(ids) > 1 else ""
    return f"calibrated on {record.label_set} / {record.criterion} ({record.calibration_id}{more}){agreement}"


def figure_evidence(run: RunView, panel: str | None, headline: Headline, family: str) -> list[FigureEvidence]:
    """The evidence of every judged figure of `headline` (a family's figures of one run)."""
    figures = [(metric, headline.units) for metric in headline.metrics]
    figures += [(figure.metric, figure.units) for figure in headline.within_run]
    judged = [(metric, units) for metric, units in figures if metric.judged_by is not None]
    if not judged:
        return []
    # an imported run (published results) names no panel: its stored scores are whoever's they are
    panel_name = panel or str((run.config.get("panel") or {}).get("name", ""))
    found = []
    for metric, units in judged:
        assert metric.judged_by is not None
        scores = run.scores(panels=[panel_name] if panel_name else None, metrics=[metric.judged_by])
        ids = sorted({s.calibration_id for s in scores if s.calibration_id is not None})
        found.append(
            FigureEvidence(
                figure=f"{family}.{metric.name}",
                description=metric.description,
                judged_by=metric.judged_by,
                panel=panel_name,
                calibration=calibration_sentence(run, ids) if scores else NOT_JUDGED_YET,
                calibration_ids=ids,
                separation=separation(units, metric),
            )
        )
    return found
