"""Profile perturbations: change one field everywhere it is mentioned, questions and answers included.

The replacement is by whole word, over every text of the profile, so
"the Marlow family" follows a surname change while "Marlowe Street" does
not. A new value is drawn only among values that appear nowhere in the
profile, so a perturbation cannot collide with another fact or a
distractor option.
"""

from __future__ import annotations

import random
import re

from appliance.errors import ApplianceError
from appliance.scenarios.simulatebench.profile import Profile, Question

# Replacement values, written for this project.
CANDIDATES: dict[str, tuple[str, ...]] = {
    "birth_year": ("1949", "1958", "1966", "1973", "1981", "1987", "1994", "2001"),
    "surname": ("Okonkwo", "Lindqvist", "Barros", "Nakashima", "Kowalczyk", "Haddad", "Ferreira", "Abernathy"),
    "education": (
        "a diploma from a vocational school for carpentry",
        "a bachelor's degree in history from the University of Ghent",
        "a master's degree in civil engineering from the Technical University of Munich",
        "a doctorate in marine biology from the University of Tasmania",
        "a secondary-school certificate and no further studies",
    ),
    "ethnicity": ("Ghanaian", "Norwegian", "Vietnamese", "Peruvian", "Lebanese", "Scottish", "Punjabi", "Navajo"),
}


def _pattern(value: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w]){re.escape(value)}(?![\w])")


def replace_everywhere(text: str, old: str, new: str) -> str:
    return _pattern(old).sub(new, text)


def perturb(profile: Profile, field: str, new_value: str) -> Profile:
    """A variant of `profile` with `field` set to `new_value` in every text that mentions it."""
    old = profile.fields.get(field)
    if old is None:
        raise ApplianceError(f"profile '{profile.id}': field 'fields.{field}' is not set, so it cannot be perturbed")
    if not _pattern(old).search(profile.text()):
        raise ApplianceError(f"profile '{profile.id}': fields.{field} = '{old}' is not mentioned in the profile")

    def swap(text: str) -> str:
        return replace_everywhere(text, old, new_value)

    questions = [
        Question(
            id=q.id,
            part=q.part,
            question=swap(q.question),
            options=[swap(option) for option in q.options],
            answer=swap(q.answer),
        )
        for q in profile.questions
    ]
    return profile.model_copy(
        update={
            "id": f"{profile.id}~{field}",
            "name": swap(profile.name),
            "fields": {**profile.fields, field: new_value},
            "immutable": swap(profile.immutable),
            "social_roles": swap(profile.social_roles),
            "relationships": swap(profile.relationships),
            "questions": questions,
            "base": profile.family_id,
            "variant": f"{field}={new_value}",
        }
    )


def all_text(profile: Profile) -> str:
    parts = [profile.name, profile.text()]
    for q in profile.questions:
        parts.extend([q.question, *q.options])
    return "\n".join(parts)


def variants(profile: Profile, per_field: int, seed: int) -> list[Profile]:
    """Up to `per_field` variants for each perturbable field the profile declares."""
    rng = random.Random(f"{seed}/{profile.id}")
    everything = all_text(profile)
    made = []
    for field, candidates in CANDIDATES.items():
        if field not in profile.fields:
            continue
        fresh = [value for value in candidates if not _pattern(value).search(everything)]
        for value in rng.sample(fresh, min(per_field, len(fresh))):
            variant = perturb(profile, field, value)
            made.append(variant.model_copy(update={"id": f"{profile.id}~{field}-{candidates.index(value) + 1}"}))
    return made
