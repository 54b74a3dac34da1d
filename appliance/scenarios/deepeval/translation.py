"""Translation (asymmetric writer-editor): a Translator drafts, a Proofreader polishes; the panel rates both."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from appliance.engine.types import Sampling
from appliance.episodes import EpisodeContext
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
