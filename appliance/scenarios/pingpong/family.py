"""PingPong: an interrogator model talks to a player model that plays a character.

The player sees only the character card, the interrogator only the situation
(and the character's public name and summary): the asymmetry is the method.
After the conversation every judge of the panel scores every player turn on
in-character, entertaining and fluent (1-5) and flags refusals, reading the
whole conversation once (or turn by turn: `judging.py`); the panel averages
its judges.
"""

from __future__ import annotations

import re
from pathlib import Path
from statistics import mean
from types import MappingProxyType
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from appliance.catalog.sampling import Sampling
from appliance.engine.types import Message
from appliance.episodes.client import ContextFull
from appliance.episodes.context import EpisodeContext
from appliance.errors import ApplianceError, describe_validation_error
from appliance.judging.scoring_templates import ExpectedScoreTemplate, LikelihoodTemplate, ScoringTemplate
from appliance.judging.templates import (
    REFUSAL,
    ConversationTemplate,
    LikertTemplate,
    load_conversation_template,
    load_judge_template,
    load_likert_template,
    render,
)
from appliance.run_config import SupportRole
from appliance.scenarios.base import Instance, JudgedFamily
from appliance.scenarios.pingpong.judging import (
    JUDGING_FILE,
    JudgingSettings,
    judge_conversation,
    judge_each_turn,
    judge_turn_likelihood,
)
from appliance.store.records import JudgmentRecord, ScoreRecord
from appliance.util.tomlfile import read_toml

# The method's sampling (PingPong paper): player 0.6 / top_p 0.9, interrogator 0.8 / 0.95. The token
# caps are well above a chat reply (a few sentences, under 150 tokens), so they cut only run-away text,
# which the report counts; higher caps let one run-away reply overflow a 2,048-token context.
PLAYER_SAMPLING = Sampling(temperature=0.6, top_p=0.9, max_tokens=256)
INTERROGATOR_SAMPLING = Sampling(temperature=0.8, top_p=0.95, max_tokens=128)
JUDGE_TEMPLATE = "pingpong_likert.toml"
CONVERSATION_TEMPLATE = "pingpong_conversation.toml"
#: the paper's conversation length where a situation does not give its own
DEFAULT_TURNS = 4
CRITERIA = ("in_character", "entertaining", "fluent")
DESCRIPTION = "role-play: interrogator vs character player, judged per turn by a panel"

Entry = TypeVar("Entry", bound=BaseModel)


class Card(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    language: str
    name: str
    summary: str
    description: str
    greeting: str = ""


class Situation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    language: str
    text: str
    turns: int = Field(default=DEFAULT_TURNS, ge=1, le=20)
    tags: tuple[str, ...] = ()


class Prompts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    player_system: str
    interrogator_system: str
    opening: str
    opening_without_greeting: str


class PingPongInstance(Instance):
    card: Card
    situation: Situation


def _read_entries(path: Path, table: str, model: type[Entry]) -> list[Entry]:
    raw = read_toml(path).get(table, [])
    if not isinstance(raw, list) or not raw:
        raise ApplianceError(f"{path}: field '{table}': no [[{table}]] entries")
    entries: list[Entry] = []
    for index, entry in enumerate(raw):
        try:
            entries.append(model(**entry))
        except ValidationError as error:
            raise ApplianceError(describe_validation_error(f"{path} [[{table}]] #{index + 1}", error)) from None
    return entries


#: under a likelihood panel, the human labels each score is calibrated to (FED turn level, the closest
#: stored ratings of single chat replies); in-character has none (no stored set rates role consistency)
LIKELIHOOD_TARGETS = MappingProxyType(
    {"final": ("fed-turn", "Overall"), "entertaining": ("fed-turn", "Engaging"), "fluent": ("fed-turn", "Fluent")}
)


class PingPongFamily(JudgedFamily):
    name = "pingpong"
    description = DESCRIPTION
    support_roles: tuple[SupportRole, ...] = ("interrogator",)
    judge_template = JUDGE_TEMPLATE.removesuffix(".toml")
    calibrated_metric = "final"
    scores_likelihood = True
    likelihood_targets = LIKELIHOOD_TARGETS

    def __init__(
        self,
        folder: Path,
        cards: list[Card],
        situations: list[Situation],
        prompts: dict[str, Prompts],
        judge: LikertTemplate,
        judge_path: Path,
        conversation_judge: ConversationTemplate,
        conversation_judge_path: Path,
        judging: JudgingSettings,
        judging_path: Path,
        judges_folder: Path | None = None,
        spec: str = "pingpong",
    ) -> None:
        #: as the run names it: `pingpong`, or `pingpong:FOLDER` for an imported folder
        self.name = spec
        self.folder = folder
        self.judges_folder = judges_folder or judge_path.parent
        self.cards = cards
        self.situations = situations
        self.prompts = prompts
        self.likert = judge
        self.judge_path = judge_path
        self.conversation_judge = conversation_judge
        self.conversation_judge_path = conversation_judge_path
        self.judging = judging
        self.judging_path = judging_path
        if judging.mode == "conversation":
            self.judge_template = conversation_judge.name
        self._scoring_templates: dict[str, ScoringTemplate] = {}

    @classmethod
    def load(
        cls, folder: Path, judges_folder: Path, prompts_folder: Path | None = None, spec: str = "pingpong"
    ) -> PingPongFamily:
        """Cards and situations from `folder`; prompts and judging settings from it too, or from `prompts_folder`."""
        cards = _read_entries(folder / "cards.toml", "card", Card)
        situations = _read_entries(folder / "situations.toml", "situation", Situation)
        prompts_path = _own_or_default(folder, prompts_folder, "prompts.toml")
        prompts: dict[str, Prompts] = {}
        for language, entry in read_toml(prompts_path).items():
            try:
                prompts[language] = Prompts(**entry)
            except (ValidationError, TypeError) as error:
                detail = (
                    describe_validation_error(f"{prompts_path} [{language}]", error)
                    if isinstance(error, ValidationError)
                    else f"{prompts_path} [{language}]: expected a table"
                )
                raise ApplianceError(detail) from None
        for card in cards:
            if card.language not in prompts:
                raise ApplianceError(f"{prompts_path}: no prompts for language '{card.language}' (card '{card.id}')")
        judging_path = _own_or_default(folder, prompts_folder, JUDGING_FILE)
        try:
            judging = JudgingSettings(**read_toml(judging_path, "judging settings"))
        except ValidationError as error:
            raise ApplianceError(describe_validation_error(judging_path, error)) from None
        judge_path = judges_folder / JUDGE_TEMPLATE
        conversation_path = judges_folder / CONVERSATION_TEMPLATE
        return cls(
            folder,
            cards,
            situations,
            prompts,
            load_likert_template(judge_path),
            judge_path,
            load_conversation_template(conversation_path),
            conversation_path,
            judging,
            judging_path,
            judges_folder,
            spec,
        )

    def instances(self) -> list[Instance]:
        """Every card paired with every situation of the same language."""
        return [
            PingPongInstance(id=f"{card.id}~{situation.id}", language=card.language, card=card, situation=situation)
            for card in self.cards
            for situation in self.situations
            if situation.language == card.language
        ]

    def data_files(self) -> list[Path]:
        judge = self.conversation_judge_path if self.judging.mode == "conversation" else self.judge_path
        return [self.folder / "cards.toml", self.folder / "situations.toml", self.judging_path, judge]

    def conversation_views(self, instance: PingPongInstance) -> tuple[list[Message], list[Message]]:
        """What the player sees before the first question (its card, its greeting) and what the
        interrogator sees (the situation and the opening)."""
        card, situation = instance.card, instance.situation
        prompts = self.prompts[card.language]
        fields = {
            "name": card.name,
            "summary": card.summary,
            "description": card.description.strip(),
            "greeting": card.greeting,
            "situation": situation.text,
        }
        source = f"{self.folder / 'prompts.toml'} [{card.language}]"
        player_view = [Message(role="system", content=render(prompts.player_system, fields, source))]
        if card.greeting:
            player_view.append(Message(role="assistant", content=card.greeting))
        opening = prompts.opening if card.greeting else prompts.opening_without_greeting
        interrogator_view = [
            Message(role="system", content=render(prompts.interrogator_system, fields, source)),
            Message(role="user", content=render(opening, fields, source)),
        ]
        return player_view, interrogator_view

    async def play(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        assert isinstance(instance, PingPongInstance)
        ctx.metadata["language"] = instance.language  # the paper's leaderboards are per language
        player_view, interrogator_view = self.conversation_views(instance)
        turns = ctx.max_turns or instance.situation.turns
        for turn in range(turns):
            try:
                question = await ctx.generate(
                    "interrogator", interrogator_view, sampling=INTERROGATOR_SAMPLING, record=False
                )
                question_text = clean_interrogator_message(question.text)
                answer = await ctx.generate(
                    "player",
                    [*player_view, Message(role="user", content=question_text)],
                    sampling=PLAYER_SAMPLING,
                    record=False,
                )
            except ContextFull as error:
                if turn == 0:
                    raise
                # The paper's 8-turn situation outgrows a small model's context: judge the turns that fit.
                ctx.metadata["ended_early"] = f"after turn {turn} of {turns}: {error}"
                ctx.record_note("gm", f"conversation ended after turn {turn} of {turns}: the context is full")
                break
            # The transcript keeps what the player was shown.
            ctx.record_message(
                "interrogator", ctx.model_for("interrogator"), question.model_copy(update={"text": question_text})
            )
            asked(player_view, interrogator_view, question_text)
            ctx.record_message("player", ctx.model_for("player"), answer)
            answered(player_view, interrogator_view, answer.text)
        await self.judge(ctx, instance, judges, panel)

    async def judge(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        """The panel's verdicts on every player turn, in the family's judging mode; then the episode's scores."""
        assert isinstance(instance, PingPongInstance)
        card = instance.card
        variables = judge_variables(instance)
        if ctx.likelihood_template is not None:
            template = self.scoring_template(ctx.likelihood_template)
            ctx.metadata["judging"] = f"likelihood ({template.name})"
            await judge_turn_likelihood(ctx, template, variables, card.greeting, judges, panel)
            ctx.scores.extend(likelihood_scores(ctx.judgments, template, panel=panel, player=ctx.model_for("player")))
            return
        ctx.metadata["judging"] = self.judging.mode
        if self.judging.mode == "conversation":
            await judge_conversation(ctx, self.conversation_judge, variables, card.greeting, judges, panel)
        else:
            await judge_each_turn(ctx, self.likert, variables, card.greeting, judges, panel)
        ctx.scores.extend(episode_scores(ctx.judgments, panel=panel, player=ctx.model_for("player")))

    def scoring_template(self, name: str) -> ScoringTemplate:
        """A likelihood panel's template from judges/ (read once per family)."""
        cached = self._scoring_templates.get(name)
        if cached is None:
            loaded = load_judge_template(self.judges_folder / f"{name}.toml")
            if not isinstance(loaded, LikelihoodTemplate | ExpectedScoreTemplate):
                raise ApplianceError(
                    f"{self.judges_folder / f'{name}.toml'}: field 'mode': expected 'likelihood' or 'expected' "
                    f"for a likelihood panel, found '{loaded.mode}'"
                )
            cached = self._scoring_templates[name] = loaded
        return cached


def asked(player_view: list[Message], interrogator_view: list[Message], question: str) -> None:
    """Both views after the interrogator's (cleaned) question."""
    interrogator_view.append(Message(role="assistant", content=question))
    player_view.append(Message(role="user", content=question))


def answered(player_view: list[Message], interrogator_view: list[Message], answer: str) -> None:
    """Both views after the player's reply."""
    player_view.append(Message(role="assistant", content=answer.strip()))
    interrogator_view.append(Message(role="user", content=answer.strip()))


def judge_variables(instance: PingPongInstance) -> dict[str, str]:
    """What every judge template of the family is filled with besides the conversation."""
    card = instance.card
    return {"name": card.name, "description": card.description.strip(), "situation": instance.situation.text}


def likelihood_scores(
    judgments: list[JudgmentRecord], template: ScoringTemplate, *, panel: str, player: str
) -> list[ScoreRecord]:
    """A likelihood panel's episode scores: `final` is the panel mean of the summary feature per reply,
    then the mean over replies (raw; its calibration maps it to a human scale). Likelihood judges
    score no separate criteria and flag no refusals, so those metrics stay empty."""
    per_turn: dict[int, list[float]] = {}
    for judgment in judgments:
        if judgment.template == template.name and judgment.criterion == template.summary and judgment.score is not None:
            per_turn.setdefault(judgment.target_idx, []).append(judgment.score)
    unparsed = {(j.judge, j.target_idx) for j in judgments if not j.parsed}
    turn_means = [mean(values) for values in per_turn.values()]
    values: dict[str, float | None] = dict.fromkeys((*CRITERIA, "refusal"))
    values["final"] = mean(turn_means) if turn_means else None
    values["unparsed_verdicts"] = float(len(unparsed))
    return [ScoreRecord(panel=panel, player=player, metric=metric, value=value) for metric, value in values.items()]


def _own_or_default(folder: Path, default_folder: Path | None, name: str) -> Path:
    """A data folder's own settings file, else the default folder's (imported folders carry only data)."""
    own = folder / name
    return own if own.is_file() or default_folder is None else default_folder / name


def clean_interrogator_message(text: str) -> str:
    """Small models wrap their message in quotes or prefix a speaker label; keep the message."""
    cleaned = text.strip()
    cleaned = re.sub(r"^(User|Nutzer|Пользователь)\s*:\s*", "", cleaned)
    if len(cleaned) >= 2 and cleaned[0] == cleaned[-1] and cleaned[0] in "\"'«»":
        cleaned = cleaned[1:-1].strip()
    return cleaned or "..."


def episode_scores(judgments: list[JudgmentRecord], *, panel: str, player: str) -> list[ScoreRecord]:
    """Panel mean per turn and criterion, then the episode's mean over turns.

    Refusals follow the authors' leaderboard code: `refusal` is 1 when any judge
    flagged any turn, and a flagging judge's verdicts on the conversation are
    dropped, so the other judges alone score it (no judge left: no scores).
    `final` is the mean of the three criteria. Unparsed verdicts are left out of
    the means and counted in `unparsed_verdicts`.
    """
    parsed = [j for j in judgments if j.parsed and j.score is not None]
    flagging = {j.judge for j in parsed if j.criterion == REFUSAL and j.score is not None and j.score > 0.5}
    per_turn: dict[tuple[int, str], list[float]] = {}
    unparsed = {(j.judge, j.target_idx) for j in judgments if not j.parsed}
    for judgment in parsed:
        if judgment.judge not in flagging and judgment.criterion != REFUSAL and judgment.score is not None:
            per_turn.setdefault((judgment.target_idx, judgment.criterion), []).append(judgment.score)
    turns = sorted({j.target_idx for j in judgments})
    values: dict[str, float | None] = {}
    for criterion in CRITERIA:
        turn_means = [mean(per_turn[(t, criterion)]) for t in turns if (t, criterion) in per_turn]
        values[criterion] = mean(turn_means) if turn_means else None
    criterion_values = [values[c] for c in CRITERIA]
    values["final"] = (
        None if any(v is None for v in criterion_values) else mean([v for v in criterion_values if v is not None])
    )
    measured = any(j.criterion == REFUSAL for j in parsed)
    values["refusal"] = float(bool(flagging)) if measured else None
    values["unparsed_verdicts"] = float(len(unparsed))
    return [ScoreRecord(panel=panel, player=player, metric=metric, value=value) for metric, value in values.items()]
