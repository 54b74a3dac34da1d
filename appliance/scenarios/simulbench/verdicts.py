"""How SimulBench turns judge verdicts into decisions and scores.

- Extraction: a turn is challenging when more than half of the judges whose
  verdict parsed say yes; the first such turn starts the hard scripts.
- Rating: the panel mean of the judges' 1-10 scores.
- Comparison: each judge's two orders are combined first (a win needs both
  orders, equal ties are a tie, anything else counts as a tie); the panel
  then votes, and the sign of the mean vote is the pair's outcome.
- Comparison under a likelihood panel: each judge reads the pair's features
  (`judging.scoring.pair_reading`); the raw outcome is the sign of the panel's
  mean direct preference (A against B, both orders), and the calibrated one
  comes from a pairwise calibration with its tie band (`calibration.apply`).
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import mean

from appliance.judging.scoring_templates import POSITION_LEAN, PREFERENCE
from appliance.judging.templates import RATING, YES
from appliance.judging.verdicts import PairVerdict
from appliance.store.records import JudgmentRecord, ScoreRecord

#: per-judge vote from the first response's point of view
OUTCOME_VOTE = {"first": 1.0, "second": -1.0, "tie": 0.0, "inconsistent": 0.0}


def first_challenging_turn(judgments: list[JudgmentRecord], turns: int) -> int | None:
    """The first turn (1-based, judgments' `target_idx`) a strict majority of parsed verdicts marks yes."""
    for turn in range(1, turns + 1):
        votes = [j.score for j in judgments if j.target_idx == turn and j.criterion == YES and j.parsed]
        parsed = [vote for vote in votes if vote is not None]
        if parsed and sum(parsed) > len(parsed) / 2:
            return turn
    return None


def rating_scores(judgments: list[JudgmentRecord], *, panel: str, player: str) -> list[ScoreRecord]:
    """`rating`: the panel mean (None when no judge's verdict parsed); `unparsed_verdicts`: how many did not."""
    ratings = [j for j in judgments if j.panel == panel and j.criterion == RATING]
    values = [j.score for j in ratings if j.parsed and j.score is not None]
    return [
        ScoreRecord(panel=panel, player=player, metric="rating", value=mean(values) if values else None),
        ScoreRecord(panel=panel, player=player, metric="unparsed_verdicts", value=float(len(ratings) - len(values))),
    ]


def pair_outcome(verdicts: list[PairVerdict]) -> float | None:
    """+1 the first response wins, -1 it loses, 0 a tie; None when no judge gave both orders."""
    votes = [OUTCOME_VOTE[v.outcome] for v in verdicts if v.outcome in OUTCOME_VOTE]
    if not votes:
        return None
    average = mean(votes)
    return 1.0 if average > 0 else -1.0 if average < 0 else 0.0


def pair_scores(verdicts: list[PairVerdict], *, panel: str, player: str) -> list[ScoreRecord]:
    """`pair_outcome` from the first model's point of view, and the share of position-biased judges."""
    biased = [1.0 if v.position_biased else 0.0 for v in verdicts if v.outcome != "unparsed"]
    return [
        ScoreRecord(panel=panel, player=player, metric="pair_outcome", value=pair_outcome(verdicts)),
        ScoreRecord(panel=panel, player=player, metric="position_bias", value=mean(biased) if biased else None),
    ]


def read_pair_scores(
    readings: Mapping[str, Mapping[str, float] | None], *, panel: str, player: str
) -> list[ScoreRecord]:
    """`pair_outcome` from each judge's direct preference (the sign of their mean; None when no judge read
    the pair), and `position_bias`: the share of judges whose lean toward a slot outweighs their
    preference, so that the response shown first (or second) wins in both orders."""
    read = [features for features in readings.values() if features is not None and PREFERENCE in features]
    preferences = [features[PREFERENCE] for features in read]
    biased = [1.0 if abs(f.get(POSITION_LEAN, 0.0)) > abs(f[PREFERENCE]) else 0.0 for f in read]
    average = mean(preferences) if preferences else None
    outcome = None if average is None else 1.0 if average > 0 else -1.0 if average < 0 else 0.0
    return [
        ScoreRecord(panel=panel, player=player, metric="pair_outcome", value=outcome),
        ScoreRecord(panel=panel, player=player, metric="position_bias", value=mean(biased) if biased else None),
    ]
