"""The dictionaries a chain move is checked against: any idiom or noun in them counts.

Both come from packages installed with the appliance, read as data files
(nothing is imported, nothing is downloaded): the idioms (tag `i`) of four
Chinese characters in jieba's lexicon, and the nouns of lemminflect's
inflection lexicon with their plural forms. Our own word lists (the games'
openings) are added to them.
"""

from __future__ import annotations

import csv
import gzip
import re
from functools import cache
from importlib import metadata
from pathlib import Path

from appliance.errors import ApplianceError

_FOUR_HANZI = re.compile(r"[\u4e00-\u9fff]{4}")
_LOWER_WORD = re.compile(r"[a-z]+")


def _package_file(package: str, relative: str) -> Path:
    try:
        path = Path(str(metadata.distribution(package).locate_file(relative)))
    except metadata.PackageNotFoundError:
        raise ApplianceError(f"the chain games need the package '{package}' (pip install -e .)") from None
    if not path.is_file():
        raise ApplianceError(f"{path}: the dictionary file of package '{package}' is missing")
    return path


@cache
def idiom_dictionary() -> frozenset[str]:
    """Four-character idioms (成语) of jieba's lexicon: lines `word frequency tag`, idioms tagged `i`."""
    idioms: set[str] = set()
    with _package_file("jieba", "jieba/dict.txt").open(encoding="utf-8") as lines:
        for line in lines:
            word, _, tag = line.rstrip("\n").rpartition(" ")
            word = word.rpartition(" ")[0]
            if tag == "i" and _FOUR_HANZI.fullmatch(word):
                idioms.add(word)
    return frozenset(idioms)


@cache
def noun_dictionary() -> frozenset[str]:
    """English nouns of lemminflect's lexicon (rows `lemma,noun,form/form`), lower-case, with their forms."""
    nouns: set[str] = set()
    path = _package_file("lemminflect", "lemminflect/resources/infl_lu.csv.gz")
    with gzip.open(path, "rt", encoding="utf-8") as rows:
        for row in csv.reader(rows):
            if len(row) >= 3 and row[1] == "noun":
                nouns.update(w for w in [row[0], *row[2].split("/")] if _LOWER_WORD.fullmatch(w))
    return frozenset(nouns)
