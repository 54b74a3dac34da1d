"""Judge templates: the prompt, the output grammar and the parse rule of each judging mode.

Every judge answers under a GBNF grammar, so even a 135M model produces a
well-formed verdict; the parser still checks everything, because a reply can
be cut short by the token limit. The four modes:

- `likert`: several criteria on a small digit scale, plus a refusal flag (PingPong);
- `rating`: one score on a wider scale, e.g. 1-10, with a rubric (SimulBench);
- `pairwise`: which of two responses is better, A, B or tie (asked in both orders);
- `yesno`: a single yes/no check;
- `roles`: every role of a collaboration rated in one verdict, each with the basis of its score
  (DeepEval's referee).

Two more modes read probabilities instead of sampling (`scoring_templates.py`): `likelihood`
and `expected`.

`parse` returns the verdict as numbers keyed by output name, or None.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from appliance.engine.types import Message
from appliance.errors import ApplianceError, describe_validation_error
from appliance.judging.scoring_templates import ExpectedScoreTemplate, LikelihoodTemplate
from appliance.util.tomlfile import read_toml

REFUSAL = "refusal"
RATING = "score"
PREFERENCE = "preference"
YES = "yes"


class _TemplateBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    system: str
    user: str
    max_tokens: int = Field(default=32, ge=4)
    temperature: float = Field(default=0.0, ge=0.0)
    #: verdicts sampled per judgment and averaged; tiny judges answer greedily with one score for
    #: everything, while the mean of a few samples at temperature 1 follows their actual uncertainty
    samples: int = Field(default=1, ge=1, le=32)

    def fingerprint(self) -> str:
        """Identifies the prompt and rules: a stored verdict is reused only for the same template."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]

    def parse(self, text: str) -> dict[str, float] | None:
        raise NotImplementedError

    def parse_samples(self, texts: list[str]) -> dict[str, float] | None:
        """The mean of the verdicts that parse, output by output; None if none parses."""
        verdicts = [v for v in (self.parse(text) for text in texts) if v is not None]
        if not verdicts:
            return None
        return {key: sum(v[key] for v in verdicts) / len(verdicts) for key in verdicts[0]}

    def _load_json(self, text: str) -> dict[str, Any] | None:
        try:
            data = json.loads(text.strip())
        except json.JSONDecodeError:
            return None
        return data if isinstance(data, dict) else None


class LikertTemplate(_TemplateBase):
    """Per-turn multi-criteria Likert rating with an optional refusal flag."""

    mode: Literal["likert"] = "likert"
    criteria: list[str] = Field(min_length=1)
    scale_min: int = 1
    scale_max: int = 5
    refusal_flag: bool = True
    max_tokens: int = Field(default=64, ge=4)

    @model_validator(mode="after")
    def _check(self) -> LikertTemplate:
        _check_likert(self.criteria, self.scale_min, self.scale_max)
        return self

    def outputs(self) -> list[str]:
        return [*self.criteria, *([REFUSAL] if self.refusal_flag else [])]

    def grammar(self) -> str:
        """`{"crit1": d, ..., "refusal": true|false}` with d on the template's scale."""
        body = _likert_object(self.criteria, self.refusal_flag)
        return "\n".join(
            [
                f'root ::= "{{" {body} "}}"',
                f"digit ::= [{self.scale_min}-{self.scale_max}]",
                'boolean ::= "true" | "false"',
            ]
        )

    def parse(self, text: str) -> dict[str, float] | None:
        data = self._load_json(text)
        return None if data is None else _likert_verdict(data, self.criteria, self.scale, self.refusal_flag)

    def summary_score(self, verdict: dict[str, float]) -> float:
        """One number per verdict (mean of the criteria), what a calibration maps."""
        return sum(verdict[c] for c in self.criteria) / len(self.criteria)

    @property
    def scale(self) -> tuple[float, float]:
        return float(self.scale_min), float(self.scale_max)


class ConversationTemplate(_TemplateBase):
    """The whole conversation read once; every reply of the character scored on Likert criteria.

    This is how the PingPong paper judges. The judge may first write a short reasoning
    (`reasoning_chars`, 0 for none), then one object per scored turn, in order. The
    grammar is built for the conversation's number of turns, so the verdict always has
    exactly one entry per turn. Not a calibration template: label sets hold single turns.
    """

    criteria: list[str] = Field(min_length=1)
    scale_min: int = 1
    scale_max: int = 5
    refusal_flag: bool = True
    #: the most characters of reasoning before the scores (0: scores only)
    reasoning_chars: int = Field(default=0, ge=0, le=2000)
    #: tokens allowed per scored turn; the reply budget is reasoning_chars + turns x this
    tokens_per_turn: int = Field(default=40, ge=8)

    @model_validator(mode="after")
    def _check(self) -> ConversationTemplate:
        _check_likert(self.criteria, self.scale_min, self.scale_max)
        return self

    @property
    def scale(self) -> tuple[float, float]:
        return float(self.scale_min), float(self.scale_max)

    def outputs(self) -> list[str]:
        return [*self.criteria, *([REFUSAL] if self.refusal_flag else [])]

    def budget(self, turns: int) -> int:
        """Tokens that always fit the whole verdict: a reasoning character is at most one token."""
        return self.reasoning_chars + turns * self.tokens_per_turn + 16

    def grammar(self, turns: int) -> str:
        """`{"reasoning": "...", "turns": [{...}, ... x turns]}`, the reasoning bounded in characters."""
        turn = _likert_object(self.criteria, self.refusal_flag)
        listed = ' ", " '.join(["turn"] * turns)
        lines = [
            f'root ::= "{{" {"reasoning " if self.reasoning_chars else ""}"\\"turns\\": [" {listed} "]}}"',
            f'turn ::= "{{" {turn} "}}"',
            f"digit ::= [{self.scale_min}-{self.scale_max}]",
            'boolean ::= "true" | "false"',
        ]
        if self.reasoning_chars:
            lines.append(f'reasoning ::= "\\"reasoning\\": \\"" [^"\\\\\\n]{{0,{self.reasoning_chars}}} "\\", "')
        return "\n".join(lines)

    def parse_turns(self, text: str, turns: int) -> list[dict[str, float]] | None:
        """One verdict per turn, or None when the reply is cut short or malformed."""
        data = self._load_json(text)
        listed = None if data is None else data.get("turns")
        if not isinstance(listed, list) or len(listed) != turns:
            return None
        verdicts = [
            _likert_verdict(item, self.criteria, self.scale, self.refusal_flag) if isinstance(item, dict) else None
            for item in listed
        ]
        return None if any(v is None for v in verdicts) else [v for v in verdicts if v is not None]


def _check_likert(criteria: list[str], scale_min: int, scale_max: int) -> None:
    if not 0 <= scale_min < scale_max <= 9:
        raise ValueError("scale must be single digits with scale_min < scale_max")
    for criterion in criteria:
        if not criterion.isidentifier():
            raise ValueError(f"criterion '{criterion}' must be an identifier")


def _likert_object(criteria: list[str], refusal_flag: bool) -> str:
    """The GBNF body of one Likert verdict's fields: `"crit": digit, ..., "refusal": boolean`."""
    fields = [f'"\\"{criterion}\\": " digit' for criterion in criteria]
    if refusal_flag:
        fields.append(f'"\\"{REFUSAL}\\": " boolean')
    return ' ", " '.join(fields)


def _likert_verdict(
    data: dict[str, Any], criteria: list[str], scale: tuple[float, float], refusal_flag: bool
) -> dict[str, float] | None:
    """The criteria's digits (on the scale) and the refusal flag of one Likert verdict object."""
    verdict: dict[str, float] = {}
    for criterion in criteria:
        value = _number_in(data.get(criterion), *scale)
        if value is None:
            return None
        verdict[criterion] = value
    if refusal_flag:
        flag = data.get(REFUSAL)
        if not isinstance(flag, bool):
            return None
        verdict[REFUSAL] = 1.0 if flag else 0.0
    return verdict


class RatingTemplate(_TemplateBase):
    """A single score with a rubric, e.g. 1-10."""

    mode: Literal["rating"] = "rating"
    scale_min: int = Field(default=1, ge=0)
    scale_max: int = Field(default=10, le=100)
    #: what each human criterion means, filled into {criterion_help} when a label set is rated
    criterion_help: dict[str, str] = Field(default_factory=dict)
    #: the most characters of explanation the judge writes before its score (0: the score only)
    reasoning_chars: int = Field(default=0, ge=0, le=2000)

    @model_validator(mode="after")
    def _check(self) -> RatingTemplate:
        if self.scale_min >= self.scale_max:
            raise ValueError("scale_min must be below scale_max")
        if self.reasoning_chars and self.max_tokens < self.reasoning_chars + 16:
            raise ValueError("max_tokens must hold reasoning_chars + 16 (a character is at most one token)")
        return self

    def outputs(self) -> list[str]:
        return [RATING]

    def grammar(self) -> str:
        """`{"score": n}`, or `{"reasoning": "...", "score": n}` with the explanation first."""
        values = " | ".join(f'"{value}"' for value in range(self.scale_max, self.scale_min - 1, -1))
        return _verdict_grammar(RATING, "value", self.reasoning_chars) + f"\nvalue ::= {values}"

    def parse(self, text: str) -> dict[str, float] | None:
        data = self._load_json(text)
        if data is None:
            return None
        value = _number_in(data.get(RATING), self.scale_min, self.scale_max)
        return None if value is None else {RATING: value}

    def summary_score(self, verdict: dict[str, float]) -> float:
        return verdict[RATING]

    @property
    def scale(self) -> tuple[float, float]:
        return float(self.scale_min), float(self.scale_max)


def _verdict_grammar(key: str, rule: str, reasoning_chars: int) -> str:
    """The root rule of a one-key JSON verdict, with an explanation of at most `reasoning_chars` first."""
    if not reasoning_chars:
        return f'root ::= "{{\\"{key}\\": " {rule} "}}"'
    reasoning = f'"\\"reasoning\\": \\"" [^"\\\\\\n]{{0,{reasoning_chars}}} "\\", "'
    return f'root ::= "{{" {reasoning} "\\"{key}\\": " {rule} "}}"'


class PairwiseTemplate(_TemplateBase):
    """Which of responses A and B is better; `preference` is +1 for A, -1 for B, 0 for a tie."""

    mode: Literal["pairwise"] = "pairwise"
    allow_tie: bool = True
    #: the most characters of explanation the judge writes before its choice (0: the choice only)
    reasoning_chars: int = Field(default=0, ge=0, le=2000)

    @model_validator(mode="after")
    def _one_sample(self) -> PairwiseTemplate:
        if self.samples != 1:
            raise ValueError("pairwise verdicts are combined over both orders, not averaged: samples must be 1")
        if self.reasoning_chars and self.max_tokens < self.reasoning_chars + 16:
            raise ValueError("max_tokens must hold reasoning_chars + 16 (a character is at most one token)")
        return self

    def outputs(self) -> list[str]:
        return [PREFERENCE]

    def grammar(self) -> str:
        """`{"better": "A"}`, or `{"reasoning": "...", "better": "A"}` with the explanation first."""
        choices = '"\\"A\\"" | "\\"B\\""' + (' | "\\"tie\\""' if self.allow_tie else "")
        return _verdict_grammar("better", "choice", self.reasoning_chars) + f"\nchoice ::= {choices}"

    def parse(self, text: str) -> dict[str, float] | None:
        data = self._load_json(text)
        if data is None:
            return None
        choice = data.get("better")
        mapping = {"A": 1.0, "B": -1.0, **({"tie": 0.0} if self.allow_tie else {})}
        return {PREFERENCE: mapping[choice]} if isinstance(choice, str) and choice in mapping else None

    def summary_score(self, verdict: dict[str, float]) -> float:
        return verdict[PREFERENCE]

    @property
    def scale(self) -> tuple[float, float]:
        return -1.0, 1.0


class YesNoTemplate(_TemplateBase):
    """A yes/no check; `yes` is 1 or 0."""

    mode: Literal["yesno"] = "yesno"

    def outputs(self) -> list[str]:
        return [YES]

    def grammar(self) -> str:
        return 'root ::= "{\\"answer\\": " answer "}"\nanswer ::= "\\"yes\\"" | "\\"no\\""'

    def parse(self, text: str) -> dict[str, float] | None:
        data = self._load_json(text)
        if data is None:
            return None
        answer = data.get("answer")
        return {YES: 1.0 if answer == "yes" else 0.0} if answer in ("yes", "no") else None

    def summary_score(self, verdict: dict[str, float]) -> float:
        return verdict[YES]

    @property
    def scale(self) -> tuple[float, float]:
        return 0.0, 1.0


class RolesTemplate(_TemplateBase):
    """Every role of a collaboration rated in one verdict, each with the basis of its score first:
    `{"Programmer": {"evaluation": "...", "score": n}, "Reviewer": {...}}` (DeepEval's referee, which
    rates writer and editor together). The roles are the task's, given with each call, so one template
    serves every writer-editor task; `samples` verdicts are averaged role by role."""

    mode: Literal["roles"] = "roles"
    scale_min: int = Field(default=1, ge=0)
    scale_max: int = Field(default=10, le=100)
    #: the most characters of evaluation (the stated basis) before each role's score (0: scores only)
    reasoning_chars: int = Field(default=150, ge=0, le=2000)

    @model_validator(mode="after")
    def _check(self) -> RolesTemplate:
        if self.scale_min >= self.scale_max:
            raise ValueError("scale_min must be below scale_max")
        return self

    def budget(self, roles: int) -> int:
        """Tokens that always hold the whole verdict: a reasoning character is at most one token."""
        return roles * (self.reasoning_chars + 24) + 8

    def grammar(self, roles: Sequence[str]) -> str:
        """One object per role, in order, the evaluation (bounded in characters) before the score."""
        for role in roles:
            if not role.isidentifier():
                raise ValueError(f"role '{role}' must be an identifier")
        values = " | ".join(f'"{value}"' for value in range(self.scale_max, self.scale_min - 1, -1))
        chars = self.reasoning_chars
        basis = f'"\\"evaluation\\": \\"" [^"\\\\\\n]{{0,{chars}}} "\\", " ' if chars else ""
        verdicts = ' ", " '.join(f'"\\"{role}\\": {{" {basis}"\\"{RATING}\\": " value "}}"' for role in roles)
        return f'root ::= "{{" {verdicts} "}}"\nvalue ::= {values}'

    def parse_roles(self, text: str, roles: Sequence[str]) -> dict[str, float] | None:
        """Each role's score, or None when the reply is cut short or a role's score is missing."""
        data = self._load_json(text)
        if data is None:
            return None
        verdict: dict[str, float] = {}
        for role in roles:
            entry = data.get(role)
            value = _number_in(entry.get(RATING), self.scale_min, self.scale_max) if isinstance(entry, dict) else None
            if value is None:
                return None
            verdict[role] = value
        return verdict

    def parse_role_samples(self, texts: list[str], roles: Sequence[str]) -> dict[str, float] | None:
        """The mean of the verdicts that parse, role by role; None if none parses."""
        verdicts = [v for v in (self.parse_roles(text, roles) for text in texts) if v is not None]
        if not verdicts:
            return None
        return {role: sum(v[role] for v in verdicts) / len(verdicts) for role in roles}


#: the templates whose verdict is sampled text, parsed
SampledTemplate = LikertTemplate | RatingTemplate | PairwiseTemplate | YesNoTemplate


def judge_messages(template: SampledTemplate | RolesTemplate, variables: dict[str, str]) -> list[Message]:
    """The judge's chat: the template's system and user prompts, filled."""
    source = f"judges/{template.name}.toml"
    return [
        Message(role="system", content=render(template.system, variables, source)),
        Message(role="user", content=render(template.user, variables, source)),
    ]


JudgeTemplate = Annotated[SampledTemplate | LikelihoodTemplate | ExpectedScoreTemplate, Field(discriminator="mode")]
_TEMPLATE_ADAPTER: TypeAdapter[JudgeTemplate] = TypeAdapter(JudgeTemplate)


def _number_in(value: object, low: float, high: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if low <= value <= high else None


def load_judge_template(path: Path) -> JudgeTemplate:
    """A template file of `judges/`; its `mode` (default likert) picks the kind."""
    raw = read_toml(path, "judge template")
    raw.setdefault("mode", "likert")
    try:
        return _TEMPLATE_ADAPTER.validate_python({"name": path.stem, **raw})
    except ValidationError as error:
        raise ApplianceError(describe_validation_error(path, error)) from None


def load_likert_template(path: Path) -> LikertTemplate:
    template = load_judge_template(path)
    if not isinstance(template, LikertTemplate):
        raise ApplianceError(f"{path}: field 'mode': expected 'likert', found '{template.mode}'")
    return template


def load_conversation_template(path: Path) -> ConversationTemplate:
    template = _load_own_mode(path, "conversation", ConversationTemplate)
    assert isinstance(template, ConversationTemplate)
    return template


def load_roles_template(path: Path) -> RolesTemplate:
    template = _load_own_mode(path, "roles", RolesTemplate)
    assert isinstance(template, RolesTemplate)
    return template


def _load_own_mode(path: Path, mode: str, kind: type[ConversationTemplate | RolesTemplate]) -> _TemplateBase:
    """A template of a mode that only its family uses (its grammar needs the episode's turns or roles),
    kept out of `JudgeTemplate`, which calibrations and label sets take."""
    raw = read_toml(path, "judge template")
    found = raw.pop("mode", "likert")
    if found != mode:
        raise ApplianceError(f"{path}: field 'mode': expected '{mode}', found '{found}'")
    try:
        return kind(name=path.stem, **raw)
    except ValidationError as error:
        raise ApplianceError(describe_validation_error(path, error)) from None
    except TypeError as error:
        raise ApplianceError(f"{path}: {error}") from None


def render(text: str, variables: dict[str, str], source: str) -> str:
    try:
        return text.format_map(variables)
    except KeyError as error:
        raise ApplianceError(f"{source}: template uses unknown placeholder {error}") from None
