"""Consistency accuracy (CA), the authors' answer test, and the robustness coefficient of variation (RCoV).

CA follows SimulateBench's own statistics script: for each question type t
(immutable characteristics, social roles, relationships) take the accuracy on
answerable questions and on "not enough information" questions, weight each
type by its share n_t / N of all questions, and mix the two kinds 0.9 / 0.1:

    CA = 0.9 * sum_t (n_t / N) * acc_answerable_t + 0.1 * sum_t (n_t / N) * acc_unanswerable_t

A type with no question of one kind has no accuracy for it; its share then
counts the kind it has for both (the authors' script cannot score such a
type at all).

RCoV of one perturbation = sample standard deviation (ddof 1) / mean x 100 of
CA over the base profile and the variants that change that one field.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import fmean, stdev

ANSWERABLE_WEIGHT = 0.9

#: (question type, answerable, correct) per question
QuestionResult = tuple[str, bool, bool]


def consistency_accuracy(results: Sequence[QuestionResult]) -> float | None:
    """The authors' CA over the questions of one profile (None without questions)."""
    if not results:
        return None
    total = len(results)
    answerable_part = unanswerable_part = 0.0
    for kind in dict.fromkeys(kind for kind, _, _ in results):
        own = [(answerable, correct) for k, answerable, correct in results if k == kind]
        share = len(own) / total
        answerable = [correct for is_answerable, correct in own if is_answerable]
        unanswerable = [correct for is_answerable, correct in own if not is_answerable]
        on_answerable = fmean(answerable) if answerable else fmean(unanswerable)
        on_unanswerable = fmean(unanswerable) if unanswerable else on_answerable
        answerable_part += share * on_answerable
        unanswerable_part += share * on_unanswerable
    return ANSWERABLE_WEIGHT * answerable_part + (1 - ANSWERABLE_WEIGHT) * unanswerable_part


def authors_answer_matches(gold: str, answer: str) -> bool:
    """SimulateBench's test for a free-text answer: lowercased, equal, or one contains the other.

    It is generous (an empty answer is contained in every gold answer) and is used only to
    reproduce the authors' published figures; our own runs parse the answer into an option.
    """
    gold_text, said = gold.lower(), answer.lower()
    return gold_text == said or said in gold_text or gold_text in said


def rcov(values: Sequence[float]) -> float | None:
    """Sample std / mean x 100; None for fewer than two values or a zero mean."""
    if len(values) < 2:
        return None
    average = fmean(values)
    return None if average == 0 else stdev(values) / average * 100.0
