"""Character profiles: immutable characteristics, social roles, relationships, and questions about them.

A profile is three long text sections plus `fields`, the facts a
perturbation may change (birth year, surname, education, ethnicity), each
written exactly as it appears in the text. Questions are single-choice; an
answer may be the profile's "not enough information" option, for facts the
profile does not give.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from appliance.errors import ApplianceError, describe_validation_error
from appliance.util.tomlfile import read_toml

Part = Literal["immutable", "social_role", "relationship"]
PARTS: tuple[Part, ...] = ("immutable", "social_role", "relationship")
NOT_ENOUGH_INFORMATION = "There is not enough information to answer this question."
PERTURBABLE = ("birth_year", "surname", "education", "ethnicity")
PROMPTS_FILE = "prompts.toml"


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    part: Part
    question: str
    options: list[str] = Field(min_length=2)
    answer: str

    @model_validator(mode="after")
    def _answer_is_an_option(self) -> Question:
        if self.answer not in self.options:
            raise ValueError(f"answer '{self.answer}' is not one of the options")
        if len(set(self.options)) != len(self.options):
            raise ValueError("options repeat")
        return self

    @property
    def answerable(self) -> bool:
        return not is_not_enough_information(self.answer)


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    language: str = "en"
    fields: dict[str, str] = Field(default_factory=dict)
    immutable: str
    social_roles: str
    relationships: str
    questions: list[Question] = Field(min_length=1)
    #: for a perturbed variant: the profile it was made from and what changed ("base" otherwise)
    base: str | None = None
    variant: str = "base"

    def text(self) -> str:
        """The profile as the player sees it."""
        return "\n\n".join(
            [
                f"# Immutable characteristics\n{self.immutable.strip()}",
                f"# Social roles\n{self.social_roles.strip()}",
                f"# Relationships\n{self.relationships.strip()}",
            ]
        )

    @property
    def family_id(self) -> str:
        """The base character a variant belongs to."""
        return self.base or self.id


def is_not_enough_information(option: str) -> bool:
    lowered = option.lower()
    return "not enough information" in lowered or "not enough info" in lowered


def load_profile(path: Path) -> Profile:
    raw = read_toml(path, "profile")
    try:
        return Profile(**raw)
    except ValidationError as error:
        raise ApplianceError(describe_validation_error(path, error)) from None
    except TypeError as error:
        raise ApplianceError(f"{path}: {error}") from None


def load_profiles(folder: Path) -> list[Profile]:
    files = sorted(path for path in folder.glob("*.toml") if path.name != PROMPTS_FILE)
    if not files:
        raise ApplianceError(f"{folder}: no profile files (*.toml)")
    profiles = [load_profile(path) for path in files]
    seen: set[str] = set()
    for profile, path in zip(profiles, files, strict=True):
        if profile.id in seen:
            raise ApplianceError(f"{path}: field 'id': '{profile.id}' is used by another profile")
        seen.add(profile.id)
    return profiles
