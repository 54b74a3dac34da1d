"""Reply caps sized from the instance and the seat model's tokenizer.

A cap is what the longest reply a game's prompt asks for takes in the seat
model's tokens: the fixed parts (a tag, a grid, an answer word) measured
exactly, and each free-text part ("one sentence", "one short clue") measured
on a sentence of `SENTENCE_CHARS` characters written in the instance's
language, plus `MARGIN` tokens for the end of the reply. Replies cut by a cap
all the same (finish reason `length`) are counted in the report.
"""

from __future__ import annotations

from appliance.episodes.context import EpisodeContext

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
    "it": (
        "La forma al centro della griglia sembra una lettera alta con una breve barra in cima, "
        "e le caselle tutto intorno restano vuote così che risalti chiaramente. "
    ),
    "pt": (
        "A forma no meio da grade parece uma letra alta com uma barra curta no topo, "
        "e as casas em volta ficam vazias para que ela se destaque com clareza. "
    ),
    "tr": (
        "Izgaranın ortasındaki şekil, tepesinde kısa bir çubuk olan uzun bir harfe benziyor "
        "ve çevresindeki hücreler boş bırakıldığı için açıkça göze çarpıyor. "
    ),
    "zh": "方格图中间的图形像一个高高的字母，顶上有一条短横线，四周的格子都是空的，所以它非常显眼。",
    "ja": (
        "グリッドの真ん中の形は、上に短い横棒がある背の高い文字のように見え、"
        "周りのマスはすべて空なのではっきり目立ちます。"
    ),
}


def sentence(language: str = "en") -> str:
    """A stand-in for the longest free-text sentence a reply may hold, in `language` (English if unknown)."""
    prose = _PROSE.get(language, _PROSE["en"])
    return (prose * (SENTENCE_CHARS // len(prose) + 1))[:SENTENCE_CHARS]


def reply_cap(ctx: EpisodeContext, binding: str, longest_reply: str) -> int:
    """Tokens for `longest_reply` with the tokenizer of the model bound to `binding`, plus the margin."""
    return ctx.count_tokens(binding, longest_reply) + MARGIN
