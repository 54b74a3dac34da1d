"""`appliance import simulatebench-results PATH`: the authors' published answers as a stored run.

PATH is SimulateBench's `db/benchmark` folder (or a parent of it). For every
character folder (Homer and his perturbed variants) and question type, the file
`<type>/<character>/profile_v1/system_v1/benchmark_v2/<shot>/<prompt>.json`
holds each question with the gold answer and one `generated_answer_<model>` per
model. Every (model, character) with answers to all three types becomes one
episode; each answer becomes a `choice` verdict judged with the authors' own
test (`metrics.authors_answer_matches`), so `appliance report` computes CA and
RCoV from the published answers with the same code as for our runs.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.episodes.context import EpisodeKey, imported_episode
from appliance.errors import ApplianceError
from appliance.scenarios.base import RULE_SCORER
from appliance.scenarios.simulatebench.importer import QUESTION_FOLDERS, variant_label
from appliance.scenarios.simulatebench.metrics import authors_answer_matches
from appliance.scenarios.simulatebench.profile import is_not_enough_information
from appliance.store import EpisodeRecord, JudgmentRecord, RunRecord, Store

SCENARIO = "simulatebench"
ANSWER_PREFIX = "generated_answer_"
SETTING_FOLDER = "profile_v1/system_v1/benchmark_v2"
AUTHORS_TEST = "authors' containment test"
#: the character every published variant was made from
BASE_CHARACTER = "homer"


def find_benchmark_root(path: Path) -> Path:
    for candidate in (path, path / "benchmark", path / "db" / "benchmark"):
        if all((candidate / folder).is_dir() for folder in QUESTION_FOLDERS):
            return candidate
    raise ApplianceError(
        f"{path}: no {', '.join(QUESTION_FOLDERS)} folders found (expected SimulateBench's db/benchmark folder)"
    )


def _answers_file(root: Path, kind: str, character: str, prompt: str) -> Path:
    shot, _, name = prompt.partition("/")
    return root / kind / character / SETTING_FOLDER / shot / f"{name}.json"


def _load_answers(file: Path, prompt: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ApplianceError(f"{file}: not valid JSON: {error}") from None
    key = prompt.replace("/", "_")
    entries = data.get(key) if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("gold_answer"), str) for e in entries
    ):
        raise ApplianceError(f"{file}: field '{key}': expected a list of questions with a 'gold_answer'")
    return entries


def _models(entries: list[dict[str, Any]]) -> set[str]:
    """Models that answered every question of the file."""
    per_entry = [{k.removeprefix(ANSWER_PREFIX) for k in entry if k.startswith(ANSWER_PREFIX)} for entry in entries]
    return set.intersection(*per_entry) if per_entry else set()


def _variant(character: str) -> tuple[str, str]:
    """(variant, field) of a published character folder: `homer_1985` -> ("birth_year=1985", "birth_year")."""
    if character == BASE_CHARACTER:
        return "base", "base"
    variant = variant_label(character.removeprefix(f"{BASE_CHARACTER}_"))
    return variant, variant.split("=")[0]


def import_published_answers(store: Store, path: Path, prompt: str = "few_shot/prompt1") -> tuple[str, int, bool]:
    """(run id, episodes, newly imported); the same files imported twice reuse the first run."""
    root = find_benchmark_root(path)
    characters = sorted(
        folder.name
        for folder in (root / "basic_information").iterdir()
        if all(_answers_file(root, kind, folder.name, prompt).is_file() for kind in QUESTION_FOLDERS)
    )
    if not characters:
        raise ApplianceError(f"{root}: no character has '{prompt}' answers for all three question types")
    files = {(c, kind): _answers_file(root, kind, c, prompt) for c in characters for kind in QUESTION_FOLDERS}
    digest = hashlib.sha256(prompt.encode())
    for file in files.values():
        digest.update(file.read_bytes())
    run_id = f"simulatebench-import-{digest.hexdigest()[:12]}"
    if store.has_run(run_id):
        return run_id, store.episode_count(run_id), False
    now = datetime.now(UTC).replace(tzinfo=None)
    episodes = [
        episode for character in characters for episode in _character_episodes(run_id, character, files, prompt, now)
    ]
    store.import_run(
        RunRecord(
            run_id=run_id,
            started_at=now,
            seed=0,
            config={
                "scenarios": [SCENARIO],
                "imported_from": str(root.resolve()),
                "format": "SimulateBench published answers",
                "prompt": prompt,
            },
            versions={},
            git_revision=None,
            file_hashes={},
        ),
        [],
        episodes,
    )
    return run_id, len(episodes), True


def _character_episodes(
    run_id: str, character: str, files: dict[tuple[str, str], Path], prompt: str, now: datetime
) -> list[EpisodeRecord]:
    """One episode per model that answered every question of `character` (a profile or one of its variants)."""
    answers = {kind: _load_answers(files[character, kind], prompt) for kind in QUESTION_FOLDERS}
    models = set.intersection(*(_models(entries) for entries in answers.values()))
    variant, field = _variant(character)
    questions = [(part, entry) for kind, part in QUESTION_FOLDERS.items() for entry in answers[kind]]
    return [
        imported_episode(
            EpisodeKey(run_id, SCENARIO, character, model),
            now,
            player_model=model,
            metadata={"character": BASE_CHARACTER, "variant": variant, "field": field, "answer_test": AUTHORS_TEST},
            judgments=[_verdict(part, index, entry, model) for index, (part, entry) in enumerate(questions)],
        )
        for model in sorted(models)
    ]


def _verdict(part: str, index: int, entry: dict[str, Any], model: str) -> JudgmentRecord:
    gold = entry["gold_answer"]
    answer = str(entry[ANSWER_PREFIX + model])
    kind = "not_enough_information" if is_not_enough_information(gold) else "answerable"
    return JudgmentRecord(
        panel=RULE_SCORER,
        judge="authors-containment",
        mode="choice",
        template="simulatebench-published",
        target_idx=index,
        criterion=f"{part}/{kind}",
        score=1.0 if authors_answer_matches(gold, answer) else 0.0,
        raw_text=answer,
        parsed=True,
    )
