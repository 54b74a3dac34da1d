"""Consistency accuracy (CA) and the robustness coefficient of variation (RCoV).

CA weights the two kinds of question equally: the mean of the accuracy on
answerable questions and the accuracy on questions whose right answer is
"not enough information". A player that always claims ignorance, or one
that always invents an answer, therefore gets at most about half, however
the two kinds are mixed in a profile. Where a profile has only one kind,
CA is that kind's accuracy.

RCoV over the variants of a character = population standard deviation of
their CAs / their mean: 0 when a perturbation changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean, pstdev


def consistency_accuracy(results: Sequence[tuple[bool, bool]]) -> float | None:
    """`results` holds (answerable, correct) per question."""
    answerable = [correct for is_answerable, correct in results if is_answerable]
    unanswerable = [correct for is_answerable, correct in results if not is_answerable]
    accuracies = [fmean(group) for group in (answerable, unanswerable) if group]
    return fmean(accuracies) if accuracies else None


def rcov(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    average = fmean(values)
    return None if average == 0 else pstdev(values) / average
