"""The criteria a person rates a transcript on in the page: the ones its judges rated it on.

A transcript judged with a Likert or whole-conversation template is rated by people on the same
criteria and scale, so their labels can calibrate those judges later. Transcripts no judge rated
(clembench's games are scored by rules) get one "overall" criterion on 1-5.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from appliance.errors import ApplianceError
from appliance.judging.templates import (
    ConversationTemplate,
    LikertTemplate,
    RatingTemplate,
    RolesTemplate,
    load_conversation_template,
    load_judge_template,
    load_roles_template,
)
from appliance.util.tomlfile import read_toml


@dataclass(frozen=True)
class LabelCriterion:
    name: str
    low: int
    high: int


DEFAULT_CRITERIA = [LabelCriterion("overall", 1, 5)]
#: judgment rows that are flags or free text, not a quality a person rates
NOT_RATED = {"refusal", "reasoning"}


def _template(path: Path) -> LikertTemplate | RatingTemplate | ConversationTemplate | RolesTemplate | None:
    try:
        mode = read_toml(path, "judge template").get("mode")
        if mode == "conversation":
            return load_conversation_template(path)
        if mode == "roles":
            return load_roles_template(path)
        template = load_judge_template(path)
    except ApplianceError:
        return None
    return template if isinstance(template, LikertTemplate | RatingTemplate) else None


def criteria_of_templates(templates: Iterable[str], judged: set[str], judges_dir: Path) -> list[LabelCriterion]:
    """The rated criteria of the named templates in `judges_dir`; `judged` names a rating template's criteria."""
    found: dict[str, LabelCriterion] = {}
    for name in templates:
        path = judges_dir / f"{name}.toml"
        template = _template(path) if path.is_file() else None
        if isinstance(template, LikertTemplate | ConversationTemplate):
            for criterion in template.criteria:
                found.setdefault(criterion, LabelCriterion(criterion, template.scale_min, template.scale_max))
        elif isinstance(template, RatingTemplate | RolesTemplate):
            for criterion in sorted(judged - NOT_RATED):
                found.setdefault(criterion, LabelCriterion(criterion, template.scale_min, template.scale_max))
    return list(found.values()) or DEFAULT_CRITERIA
