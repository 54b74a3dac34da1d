"""`appliance import simulatebench PATH`: SimulateBench's published profiles and questions, as our profiles.

PATH is the published `db` folder (or its parent): `profile/<name>/profile_v1/{basic_information,
roles}.json` and `benchmark_only_QA/{basic_information,role_non_relation,role_relation}/<name>/
questions.json`. Each profile becomes one TOML file; a perturbed profile (`homer_1985`) names its
base (`homer`) so that robustness is computed over the family. Profile JSON is rendered as
indented text; the options of each question are read from the question's own
"[this is a single-choice question, ... choose from: a;b;c]" suffix.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from appliance.errors import ApplianceError
from appliance.scenarios.simulatebench.profile import Part, is_not_enough_information
from appliance.util.tomlfile import to_toml

QUESTION_FOLDERS: dict[str, Part] = {
    "basic_information": "immutable",
    "role_non_relation": "social_role",
    "role_relation": "relationship",
}
_CHOICES = re.compile(r"\[this is a single-choice question,\s*you should only choose from:\s*(.*)\]\s*$", re.DOTALL)
_YEAR = re.compile(r"\b(1[89]\d\d|20\d\d)\b")


def render_json(value: Any, indent: int = 0) -> list[str]:
    """Nested JSON as readable indented lines; empty values are left out."""
    pad = "  " * indent
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            label = str(key).replace("_", " ")
            if isinstance(item, str | int | float):
                lines.append(f"{pad}{label}: {item}")
            elif item:
                lines.append(f"{pad}{label}:")
                lines.extend(render_json(item, indent + 1))
        return lines
    if isinstance(value, list):
        lines = []
        for item in value:
            if isinstance(item, str | int | float):
                lines.append(f"{pad}- {item}")
            elif item:
                lines.extend(render_json(item, indent))
                lines.append("")
        return lines
    return [f"{pad}{value}"]


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ApplianceError(f"{path}: file not found") from None
    except json.JSONDecodeError as error:
        raise ApplianceError(f"{path}: not valid JSON: {error}") from None


def parse_question(raw: object, where: str) -> tuple[str, list[str], str] | None:
    """(question, options, answer) of a published question.

    None for an open question (no option list) or a gold answer that matches no option: neither can
    be scored as single choice, and the importer counts them as skipped.
    """
    if not isinstance(raw, dict) or not isinstance(raw.get("question"), str) or "gold_answer" not in raw:
        raise ApplianceError(f"{where}: expected an object with 'question' and 'gold_answer'")
    found = _CHOICES.search(raw["question"])
    if found is None:
        return None
    options = [option.strip() for option in found.group(1).split(";") if option.strip()]
    options = list(dict.fromkeys(options))
    question = raw["question"][: found.start()].strip()
    gold = str(raw["gold_answer"]).strip()
    if gold not in options:
        # a few published answers are a shortened option ("African American" for "African American/Black")
        matching = [o for o in options if o.rstrip(".") == gold.rstrip(".")]
        if is_not_enough_information(gold):
            matching = [o for o in options if is_not_enough_information(o)]
        if not matching:
            matching = [o for o in options if o.lower().startswith(gold.lower().rstrip("."))]
        if len(matching) != 1:
            return None
        gold = matching[0]
    return question, options, gold


def import_simulatebench(path: Path, out_folder: Path) -> tuple[int, int, int]:
    """Write one TOML per profile; returns (profiles, questions, open questions skipped)."""
    root = path / "db" if (path / "db").is_dir() else path
    profiles_root, questions_root = root / "profile", root / "benchmark_only_QA"
    for folder in (profiles_root, questions_root):
        if not folder.is_dir():
            raise ApplianceError(f"{path}: folder {folder.name}/ not found (expected SimulateBench's db folder)")
    names = sorted(p.name for p in profiles_root.iterdir() if (p / "profile_v1").is_dir())
    written = asked = skipped = 0
    out_folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        questions = []
        for kind, part in QUESTION_FOLDERS.items():
            file = questions_root / kind / name / "questions.json"
            if not file.is_file():
                continue
            items = _load(file)
            if not isinstance(items, list):
                raise ApplianceError(f"{file}: expected a list of questions")
            for index, raw in enumerate(items):
                parsed = parse_question(raw, f"{file} [{index}]")
                if parsed is None:
                    skipped += 1
                    continue
                question, options, answer = parsed
                questions.append(
                    {"id": f"{part}-{index}", "part": part, "question": question, "options": options, "answer": answer}
                )
        if not questions:
            continue  # profiles published without questions cannot be scored
        basic = _load(profiles_root / name / "profile_v1" / "basic_information.json")
        roles = _load(profiles_root / name / "profile_v1" / "roles.json")
        info = basic.get("basic_information", basic) if isinstance(basic, dict) else {}
        role_map = roles.get("roles", roles) if isinstance(roles, dict) else {}
        relations = {role: block.get("relations", []) for role, block in role_map.items() if isinstance(block, dict)}
        social = {
            role: {k: v for k, v in block.items() if k != "relations"}
            for role, block in role_map.items()
            if isinstance(block, dict)
        }
        display = str(info.get("name", name))
        base = next((b for b in names if name != b and name.startswith(b + "_")), None)
        year = _YEAR.search(str(info.get("date_of_birth", "")))
        document = {
            "id": name,
            "name": display,
            "language": "en",
            "base": base,
            "variant": variant_label(name.removeprefix(f"{base}_")) if base else "base",
            "immutable": "\n".join(render_json(info)),
            "social_roles": "\n".join(render_json(social)),
            "relationships": "\n".join(render_json(relations)),
            "fields": {"birth_year": year.group(1)} if year else {},
            "questions": questions,
        }
        (out_folder / f"{_file_name(name)}.toml").write_text(to_toml(document), encoding="utf-8")
        written += 1
        asked += len(questions)
    if not written:
        raise ApplianceError(f"{path}: no profile with questions found")
    return written, asked, skipped


def variant_label(suffix: str) -> str:
    """`field=value` for a published variant folder suffix (`1985`, `surname_Garcia`, `asian`, ...)."""
    if re.fullmatch(r"\d{4}", suffix):
        return f"birth_year={suffix}"
    for field in ("education", "surname", "given_name"):
        if suffix.startswith(field + "_"):
            return f"{field}={suffix.removeprefix(field + '_')}"
    if suffix in ("male", "female"):
        return f"gender={suffix}"
    return f"ethnicity={suffix}"


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")
