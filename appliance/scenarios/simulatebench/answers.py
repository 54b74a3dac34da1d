"""Turning a character's free-text answer into one of the question's options.

Accepted, in order: a leading option letter ("B", "(B)", "B) ...", "Answer: B"),
then the text of exactly one option (whole words, case-insensitive; the
longest match wins when one option's text contains another's), then a
paraphrase of "not enough information". Anything else, refusals included,
is unparsed and counts as wrong.
"""

from __future__ import annotations

import re

from appliance.scenarios.simulatebench.profile import is_not_enough_information

LETTERS = "ABCDEFGHIJ"
_LEADING_LETTER = re.compile(r"^\W{0,2}([A-J])(?:\s*[).:\]]|\s*$|\s+-\s)")
_NAMED_LETTER = re.compile(r"\b(?:answer|option|choice)\s*(?:is|:)?\s*\(?([A-J])\)?(?![\w])", re.IGNORECASE)
_NO_INFORMATION = re.compile(
    r"not enough information|no information|cannot (?:be )?(?:know|determine|tell)|can't (?:know|tell|say)|"
    r"(?:i )?(?:do not|don't) know|not (?:mentioned|stated|specified) in",
    re.IGNORECASE,
)


def option_letters(count: int) -> str:
    return LETTERS[:count]


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s]", " ", text.lower())).strip()


def parse_choice(reply: str, options: list[str]) -> int | None:
    """The index of the chosen option, or None when the reply names none (or several)."""
    text = reply.strip()
    letters = option_letters(len(options))
    for pattern in (_LEADING_LETTER, _NAMED_LETTER):
        found = pattern.search(text)
        if found and found.group(1).upper() in letters:
            letter = found.group(1).upper()
            # "A dog barked" starts with the word "A", not the option letter
            if pattern is _LEADING_LETTER and letter == "A" and re.match(r"^A\s+[a-z]", text):
                continue
            return letters.index(letter)
    said = f" {_normalise(text)} "
    matches = [
        index
        for index, option in enumerate(options)
        if not is_not_enough_information(option) and (norm := _normalise(option)) and f" {norm} " in said
    ]
    if matches:
        longest = max(len(_normalise(options[i])) for i in matches)
        best = [i for i in matches if len(_normalise(options[i])) == longest]
        if len(best) == 1 and not _contradicts(matches, best[0], options):
            return best[0]
        return None
    if _NO_INFORMATION.search(text):
        nei = [i for i, option in enumerate(options) if is_not_enough_information(option)]
        return nei[0] if len(nei) == 1 else None
    return None


def _contradicts(matches: list[int], chosen: int, options: list[str]) -> bool:
    """Two different options named, neither contained in the other: the reply does not choose."""
    chosen_text = _normalise(options[chosen])
    return any(f" {_normalise(options[i])} " not in f" {chosen_text} " for i in matches if i != chosen)
