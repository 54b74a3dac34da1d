"""Translation (asymmetric writer-editor): a Translator drafts, a Proofreader polishes; the panel rates both."""

from __future__ import annotations

import random
from itertools import zip_longest
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from appliance.catalog.sampling import Sampling
from appliance.episodes.context import EpisodeContext
from appliance.errors import ApplianceError
from appliance.judging.templates import RolesTemplate
from appliance.scenarios.deepeval.referee import Referee, Seat
from appliance.scenarios.deepeval.settings import DeepEvalSettings, read_entries
from appliance.scenarios.deepeval.writer_editor import rate_roles

TRANSLATOR, PROOFREADER = "Translator", "Proofreader"


class Passage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    source: str
    target: str
    text: str

    @property
    def pair(self) -> str:
        return f"{self.source}->{self.target}"


def load_passages(path: Path) -> list[Passage]:
    return read_entries(path, "passage", Passage, "translation passages")


def translation_order(passages: list[Passage], pairs: list[str], rng: random.Random, source: Path) -> list[str]:
    """Passage ids in the order repetitions play them: stratified by pair, so repetition r plays
    pair r mod len(pairs) and every pair is played within the first len(pairs) repetitions (a plain
    shuffle of all passages left some pairs out of a short run). Within a pair the order is seeded."""
    by_pair: dict[str, list[str]] = {pair: [] for pair in pairs}
    for passage in sorted(passages, key=lambda p: p.id):
        if passage.pair in by_pair:
            by_pair[passage.pair].append(passage.id)
    for pair, ids in by_pair.items():
        if not ids:
            known = sorted({p.pair for p in passages})
            raise ApplianceError(
                f"{source}: translation pair '{pair}' has no passage (passages cover: {', '.join(known)})"
            )
        rng.shuffle(ids)
    rounds = zip_longest(*by_pair.values())
    return [passage_id for round_ in rounds for passage_id in round_ if passage_id is not None]


async def play_translation(ctx: EpisodeContext, settings: DeepEvalSettings, passage: Passage) -> None:
    """The draft and the polished text; the family then has the panel rate both roles."""
    rules = settings.translation
    languages = {"source": passage.source, "target": passage.target}
    ctx.metadata["pair"] = passage.pair
    referee = Referee(
        ctx,
        [
            Seat(TRANSLATOR, "player", rules.translator_system.format(**languages)),
            Seat(PROOFREADER, "partner", rules.proofreader_system.format(**languages)),
        ],
    )
    sampling = Sampling(temperature=settings.players.temperature, max_tokens=rules.max_tokens)
    referee.post(rules.translate.format(text=passage.text, **languages), [TRANSLATOR])
    referee.end_round()
    draft = (await referee.collect([TRANSLATOR], sampling=sampling))[TRANSLATOR]
    referee.post(rules.proofread.format(text=passage.text, draft=draft.strip(), **languages), [PROOFREADER])
    referee.end_round()
    await referee.collect([PROOFREADER], sampling=sampling)
    referee.end_round()


async def judge_translation(
    ctx: EpisodeContext,
    settings: DeepEvalSettings,
    passage: Passage,
    template: RolesTemplate,
    judges: list[str],
    panel: str,
) -> None:
    rules = settings.translation
    languages = {"source": passage.source, "target": passage.target}
    await rate_roles(
        ctx,
        template,
        task=f"Translate this {passage.source} text into {passage.target}, then proofread the draft.\n{passage.text}",
        criteria={
            TRANSLATOR: rules.translator_criteria.format(**languages),
            PROOFREADER: rules.proofreader_criteria.format(**languages),
        },
        judges=judges,
        panel=panel,
    )
