"""Reply caps sized from the instance and the seat model's tokenizer.

A cap is what the longest reply a game's prompt asks for takes in the seat
model's tokens: the fixed parts (a tag, a grid, an answer word) measured
exactly, and each free-text part ("one sentence", "one short clue") measured
on a sentence of `SENTENCE_CHARS` characters written in the instance's
language, plus `MARGIN` tokens for the end of the reply. Replies cut by a cap
all the same (finish reason `length`) are counted in the report.
"""

from __future__ import annotations

from appliance.episodes import EpisodeContext

#: the longest "one sentence" the prompts ask for, in characters (a long English sentence is ~150)
SENTENCE_CHARS = 240
#: tokens for the end of a reply (a closing newline, an end-of-turn marker)
MARGIN = 8

# Ordinary prose in each language the games are played in; only its tokens-per-character matters.
_PROSE = {
    "en": (
        "The shape in the middle of the grid looks like a tall letter with a short bar across its top, "
        "and the cells around it on every side are left empty so that it stands out clearly. "
    ),
    "de": (
        "Die Form in der Mitte des Gitters sieht aus wie ein hoher Buchstabe mit einem kurzen Balken oben, "
        "und die Felder rundherum bleiben leer, damit sie deutlich hervortritt. "
    ),
    "fr": (
        "La forme au milieu de la grille ressemble à une grande lettre avec une courte barre en haut, "
        "et les cases tout autour restent vides pour qu'elle ressorte nettement. "
    ),
}


def sentence(language: str = "en") -> str:
    """A stand-in for the longest free-text sentence a reply may hold, in `language` (English if unknown)."""
    prose = _PROSE.get(language, _PROSE["en"])
    return (prose * (SENTENCE_CHARS // len(prose) + 1))[:SENTENCE_CHARS]


def reply_cap(ctx: EpisodeContext, binding: str, longest_reply: str) -> int:
    """Tokens for `longest_reply` with the tokenizer of the model bound to `binding`, plus the margin."""
    return ctx.count_tokens(binding, longest_reply) + MARGIN
