"""The SimulateBench family: consistency on a profile, robustness across its perturbed variants.

An instance is one profile (a base character or a variant of it). The player
gets the whole profile as its system prompt and answers every question in a
separate request; the requests go out together, so the engine prefills the
profile once and forks it for each question. Answers are scored by rule
(`answers.parse_choice`), not by a judge. A profile that does not fit the
player's context fails the episode with the engine's overflow message: it is
reported as not fitting, never truncated.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from appliance.catalog.sampling import Sampling
from appliance.engine.types import Completion, Message
from appliance.episodes.context import EpisodeContext
from appliance.errors import ApplianceError, describe_validation_error
from appliance.judging.templates import render
from appliance.scenarios.base import RULE_SCORER, Instance, ScenarioFamily
from appliance.scenarios.simulatebench.answers import option_letters, parse_choice
from appliance.scenarios.simulatebench.metrics import consistency_accuracy
from appliance.scenarios.simulatebench.perturb import variants
from appliance.scenarios.simulatebench.profile import PARTS, PROMPTS_FILE, Profile, Question, load_profiles
from appliance.store.records import JudgmentRecord, ScoreRecord
from appliance.util.tomlfile import read_toml

PLAYER_SAMPLING = Sampling(temperature=0.0, max_tokens=32)
#: RCoV is a standard deviation: three variants per field, with the base, give it four values
VARIANTS_PER_FIELD = 3


class Prompts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    player_system: str
    question: str


class ProfileInstance(Instance):
    profile: Profile

    def describe(self) -> dict[str, str]:
        return {
            "character": self.profile.family_id,
            "variant": self.profile.variant,
            "field": self.profile.variant.split("=")[0] if "=" in self.profile.variant else self.profile.variant,
        }


DESCRIPTION = "character consistency on long profiles; robustness to profile perturbations (CA, RCoV)"


class SimulateBenchFamily(ScenarioFamily):
    """Scored by rule (the answer parser): no judge panel, nothing to calibrate."""

    name = "simulatebench"
    description = DESCRIPTION

    def __init__(
        self,
        folder: Path,
        profiles: list[Profile],
        prompts: Prompts,
        prompts_path: Path,
        seed: int = 0,
        spec: str = "simulatebench",
    ) -> None:
        #: as the run names it: `simulatebench`, or `simulatebench:FOLDER` for an imported folder
        self.name = spec
        self.folder = folder
        self.profiles = profiles
        self.prompts = prompts
        self.prompts_path = prompts_path
        self.seed = seed

    @classmethod
    def load(cls, folder: Path, prompts_folder: Path, spec: str = "simulatebench") -> SimulateBenchFamily:
        prompts_path = folder / PROMPTS_FILE
        if not prompts_path.is_file():
            prompts_path = prompts_folder / PROMPTS_FILE
        try:
            prompts = Prompts(**read_toml(prompts_path, "prompts file"))
        except ValidationError as error:
            raise ApplianceError(describe_validation_error(prompts_path, error)) from None
        return cls(folder, load_profiles(folder), prompts, prompts_path, spec=spec)

    def instances(self) -> list[Instance]:
        """Every profile; a base profile without published variants gets generated variants for each field."""
        has_variants = {p.base for p in self.profiles if p.base}
        chosen: list[Profile] = []
        for profile in self.profiles:
            chosen.append(profile)
            if profile.base is None and profile.id not in has_variants:
                chosen.extend(variants(profile, per_field=VARIANTS_PER_FIELD, seed=self.seed))
        return [ProfileInstance(id=p.id, language=p.language, profile=p) for p in chosen]

    def select_instances(self, instances: list[Instance], limit: int | None, seed: int) -> list[Instance]:
        """`--limit N`: per character, the base profile and N-1 seeded variants, taken field by field in turn.

        RCoV is per field, so the variants are spread over the fields before any field gets a second one.
        """
        if limit is None:
            return instances
        by_character: dict[str, list[ProfileInstance]] = defaultdict(list)
        for instance in instances:
            assert isinstance(instance, ProfileInstance)
            by_character[instance.profile.family_id].append(instance)
        picked: list[Instance] = []
        for character in sorted(by_character):
            group = by_character[character]
            bases = [i for i in group if i.profile.base is None]
            by_field: dict[str, list[ProfileInstance]] = defaultdict(list)
            for instance in group:
                if instance.profile.base is not None:
                    by_field[instance.describe()["field"]].append(instance)
            rng = random.Random(f"{seed}/{character}")
            for field in sorted(by_field):
                rng.shuffle(by_field[field])
            in_turn = [
                g[i]
                for i in range(max(map(len, by_field.values()), default=0))
                for g in by_field.values()
                if i < len(g)
            ]
            picked.extend([*bases, *in_turn][:limit])
        return picked

    def data_files(self) -> list[Path]:
        return [*sorted(p for p in self.folder.glob("*.toml") if p.name != PROMPTS_FILE), self.prompts_path]

    async def play(self, ctx: EpisodeContext, instance: Instance, judges: list[str], panel: str) -> None:
        assert isinstance(instance, ProfileInstance)
        profile = instance.profile
        source = str(self.prompts_path)
        system = Message(
            role="system",
            content=render(self.prompts.player_system, {"name": profile.name, "profile": profile.text()}, source),
        )
        shown = [shuffled_options(q, profile.family_id, self.seed) for q in profile.questions]
        questions = [
            self._question_text(q, options, source) for q, options in zip(profile.questions, shown, strict=True)
        ]
        answers = await asyncio.gather(
            *(
                ctx.generate(
                    "player",
                    [system, Message(role="user", content=text)],
                    sampling=PLAYER_SAMPLING,
                    conversation=q.id,
                    record=False,
                )
                for q, text in zip(profile.questions, questions, strict=True)
            )
        )
        player = ctx.model_for("player")
        results: list[tuple[Question, bool, bool]] = []
        for question, options, text, answer in zip(profile.questions, shown, questions, answers, strict=True):
            ctx.record_message(
                "questioner",
                "-",
                Completion(text=text, finish_reason="stop", prompt_tokens=0, completion_tokens=0, latency_s=0.0),
            )
            ctx.record_message("player", player, answer)
            chosen = parse_choice(answer.text, options)
            correct = chosen is not None and options[chosen] == question.answer
            results.append((question, correct, chosen is not None))
            ctx.judgments.append(
                JudgmentRecord(
                    panel=RULE_SCORER,
                    judge="answer-parser",
                    mode="choice",
                    template="simulatebench",
                    target_idx=ctx.messages[-1].idx,
                    criterion=f"{question.part}/{'answerable' if question.answerable else 'not_enough_information'}",
                    score=1.0 if correct else 0.0,
                    raw_text=options[chosen] if chosen is not None else answer.text,
                    parsed=chosen is not None,
                )
            )
        ctx.scores.extend(profile_scores(results, player))

    def _question_text(self, question: Question, options: list[str], source: str) -> str:
        letters = option_letters(len(options))
        listed = "\n".join(f"{letter}) {option}" for letter, option in zip(letters, options, strict=True))
        return render(self.prompts.question, {"question": question.question, "options": listed}, source)


def shuffled_options(question: Question, character: str, seed: int) -> list[str]:
    """The options in a seeded order, the same for a character's base profile and all its variants.

    Written and published option lists put the right answer in predictable places; a model that
    always answers "A" would otherwise score by position alone, identically on every variant.
    """
    options = list(question.options)
    random.Random(f"{seed}/{character}/{question.id}").shuffle(options)
    return options


def profile_scores(results: list[tuple[Question, bool, bool]], player: str) -> list[ScoreRecord]:
    """CA overall and per part, plain accuracies by question kind, and the unparsed count."""
    questions = [(q.part, q.answerable, correct) for q, correct, _ in results]
    values: dict[str, float | None] = {"ca": consistency_accuracy(questions)}
    for part in PARTS:
        values[f"ca_{part}"] = consistency_accuracy([q for q in questions if q[0] == part])
    answerable = [c for q, c, _ in results if q.answerable]
    unanswerable = [c for q, c, _ in results if not q.answerable]
    values["accuracy_answerable"] = sum(answerable) / len(answerable) if answerable else None
    values["accuracy_not_enough_information"] = sum(unanswerable) / len(unanswerable) if unanswerable else None
    values["unparsed_answers"] = float(sum(1 for _, _, parsed in results if not parsed))
    values["questions"] = float(len(results))
    return [ScoreRecord(panel=RULE_SCORER, player=player, metric=m, value=v) for m, v in values.items()]
