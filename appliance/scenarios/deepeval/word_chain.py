"""Word chains (symmetric): the idiom chain and its English variant.

Two seats alternate. A move must be in the dictionary (any idiom or noun of
the shipped dictionaries, `chain_dictionary.py`, or of our own list), start
with the last character of the previous item and not have been used in the
game; the players are told these rules. The first seat to break a rule loses
(payoff 0, the other 1). A game that reaches the move limit is a draw (0.5
each). A seat's hits are its valid moves. Openings come from our own list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

from appliance.catalog.sampling import Sampling
from appliance.episodes.context import EpisodeContext
from appliance.errors import ApplianceError
from appliance.scenarios.deepeval.payoffs import seat_scores
from appliance.scenarios.deepeval.referee import Referee, Seat
from appliance.scenarios.deepeval.settings import DeepEvalSettings

ChainKind = Literal["idiom", "english"]
_IDIOM = re.compile(r"[\u4e00-\u9fff]+")
_WORD = re.compile(r"[A-Za-z]+")


@dataclass(frozen=True)
class WordList:
    kind: ChainKind
    #: our own list: the openings are drawn from it
    items: frozenset[str]
    #: every valid move: our list and the shipped dictionary
    vocabulary: frozenset[str]

    @cached_property
    def _by_first_character(self) -> dict[str, list[str]]:
        """The vocabulary in order, by first character: `openings` asks for every item's continuations,
        and a scan of the whole vocabulary for each took 12 s for the shipped lists."""
        index: dict[str, list[str]] = {}
        for word in sorted(self.vocabulary):
            index.setdefault(word[0], []).append(word)
        return index

    def continuations(self, item: str) -> list[str]:
        return list(self._by_first_character.get(item[-1], []))

    def openings(self) -> list[str]:
        """Items a game can start from: the second seat has at least one valid reply."""
        return sorted(item for item in self.items if self.continuations(item))


def read_word_list(path: Path, kind: ChainKind, dictionary: frozenset[str] = frozenset()) -> WordList:
    """One item per line, `#` comments; idioms must be four Chinese characters, words lower-case letters.
    `dictionary` (the shipped one) joins the list as valid moves."""
    if not path.is_file():
        raise ApplianceError(f"{path}: word list not found")
    items: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        item = line.strip()
        if not item or item.startswith("#"):
            continue
        valid = _IDIOM.fullmatch(item) and len(item) == 4 if kind == "idiom" else item.isascii() and item.isalpha()
        if not valid or (kind == "english" and item != item.lower()):
            raise ApplianceError(f"{path}:{number}: '{item}' is not a valid {kind} entry")
        items.append(item)
    if len(items) < 2:
        raise ApplianceError(f"{path}: a word list needs at least two entries")
    return WordList(kind, frozenset(items), frozenset(items) | dictionary)


def extract_move(text: str, kind: ChainKind) -> str:
    """The move in a reply: its first run of exactly four Chinese characters (else its first run of
    them), or its first English word in lower case."""
    if kind == "english":
        word = _WORD.search(text)
        return word.group().lower() if word else ""
    runs: list[str] = _IDIOM.findall(text)
    four = [run for run in runs if len(run) == 4]
    return (four or runs or [""])[0]


def rule_broken(move: str, previous: str, used: set[str], words: WordList) -> str | None:
    """Why `move` is not a valid reply to `previous`, or None if it is."""
    if not move:
        return "no answer"
    if move not in words.vocabulary:
        return f"'{move}' is not in the dictionary"
    if move[0] != previous[-1]:
        return f"'{move}' does not start with '{previous[-1]}'"
    if move in used:
        return f"'{move}' was already used"
    return None


async def play_word_chain(ctx: EpisodeContext, settings: DeepEvalSettings, words: WordList, opening: str) -> None:
    """Play one game from `opening`; each model's payoff and hits are the means over its seats."""
    prompts = settings.word_chain.idiom if words.kind == "idiom" else settings.word_chain.english
    names = ["Player 1", "Player 2"]
    size = f"{len(words.vocabulary) // 1000 * 1000:,}"  # "about 18,000": the players are told what counts
    seats = [
        Seat(name, binding, prompts.system.format(player=name, dictionary_size=size))
        for name, binding in zip(names, ("player", "partner"), strict=True)
    ]
    referee = Referee(ctx, seats)
    chain, used = [opening], {opening}
    hits = dict.fromkeys(names, 0)
    referee.post(prompts.opening.format(chain=opening, needed=opening[-1]), [names[0]])
    referee.end_round()
    sampling = Sampling(temperature=settings.players.temperature, max_tokens=settings.word_chain.max_tokens)
    loser: str | None = None
    failure = ""
    for move_number in range(settings.word_chain.max_moves):
        mover, other = names[move_number % 2], names[(move_number + 1) % 2]
        reply = (await referee.collect([mover], sampling=sampling))[mover]
        move = extract_move(reply, words.kind)
        broken = rule_broken(move, chain[-1], used, words)
        if broken is not None:
            loser, failure = mover, broken
            referee.post(f"{mover} broke the rules ({broken}) and loses.", names)
            referee.end_round()
            break
        chain.append(move)
        used.add(move)
        hits[mover] += 1
        referee.post(prompts.turn.format(chain=" → ".join(chain), needed=move[-1]), [other])
        referee.end_round()
    payoffs = {name: 0.5 if loser is None else float(name != loser) for name in names}
    ctx.metadata.update(chain=chain, loser=loser or "", failure=failure, seat_payoffs=payoffs, seat_hits=hits)
    ctx.scores += [*seat_scores(referee.models, payoffs, "payoff"), *seat_scores(referee.models, hits, "hits")]
