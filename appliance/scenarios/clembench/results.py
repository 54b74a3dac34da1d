"""clembench's published results (per-episode `scores.json` files) imported as a stored run.

The layout is `<players>/<game>/<experiment>/<episode>/scores.json` inside a
folder or a zip. Each episode's "episode scores" become the episode's scores
under the same metric names our game masters write, so `appliance report`
aggregates imported and native runs with one code path.
"""

from __future__ import annotations

import hashlib
import json
import math
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from appliance.episodes.context import EpisodeKey, imported_episode
from appliance.errors import ApplianceError
from appliance.scenarios.base import RULE_SCORER
from appliance.store import EpisodeRecord, RunRecord, ScoreRecord, Store

SCENARIO = "clembench"


def _score_files(path: Path) -> Iterator[tuple[PurePosixPath, bytes]]:
    if path.is_dir():
        for file in sorted(path.rglob("scores.json")):
            yield PurePosixPath(file.relative_to(path).as_posix()), file.read_bytes()
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for name in sorted(archive.namelist()):
                if name.endswith("/scores.json") or name == "scores.json":
                    yield PurePosixPath(name), archive.read(name)
    else:
        raise ApplianceError(f"{path}: neither a folder nor a zip of clembench results")


def _digest(files: list[tuple[PurePosixPath, bytes]]) -> str:
    digest = hashlib.sha256()
    for name, content in files:
        digest.update(str(name).encode())
        digest.update(content)
    return digest.hexdigest()


def _numeric_scores(scores: dict[str, Any], players: str) -> list[ScoreRecord]:
    """The numeric episode scores (NaN, clembench's "not applicable", is stored as NULL)."""
    return [
        ScoreRecord(panel=RULE_SCORER, player=players, metric=metric, value=None if math.isnan(value) else float(value))
        for metric, value in scores.items()
        if isinstance(value, int | float)
    ]


def import_results(store: Store, path: Path) -> tuple[str, int, bool]:
    """(run id, episodes, newly imported); importing the same results twice reuses the first run."""
    if not path.exists():
        raise ApplianceError(f"{path}: not found")
    files = list(_score_files(path))
    run_id = f"clembench-import-{_digest(files)[:12]}"
    if store.has_run(run_id):
        return run_id, store.episode_count(run_id), False
    now = datetime.now(UTC).replace(tzinfo=None)
    episodes = [_imported_episode(path, run_id, name, content, now) for name, content in files]
    if not episodes:
        raise ApplianceError(f"{path}: no scores.json files found")
    store.import_run(
        RunRecord(
            run_id=run_id,
            started_at=now,
            seed=0,
            config={"scenarios": [SCENARIO], "imported_from": str(path.resolve()), "format": "clembench scores.json"},
            versions={},
            git_revision=None,
            file_hashes={},
        ),
        [],
        episodes,
    )
    return run_id, len(episodes), True


def folder_pairing(players: str) -> tuple[str, str]:
    """The two models of clembench's results folder name `A--B` (B played the partner roles; self-play is
    `A--A`, or a lone `A`)."""
    first, separator, second = players.partition("--")
    return first, second if separator else first


def _imported_episode(path: Path, run_id: str, name: PurePosixPath, content: bytes, now: datetime) -> EpisodeRecord:
    """One episode from `<players>/<game>/<experiment>/<episode>/scores.json`."""
    parts = name.parts
    if len(parts) < 5:
        raise ApplianceError(f"{path}: {name}: expected <players>/<game>/<experiment>/<episode>/scores.json")
    players, game, experiment, episode = parts[-5:-1]
    try:
        scores = json.loads(content)
        episode_scores = scores["episode scores"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as error:
        raise ApplianceError(f"{path}: {name}: no 'episode scores' ({error})") from None
    instance_id = f"{game}/{experiment}/{episode}"
    player_model, partner_model = folder_pairing(players)
    return imported_episode(
        EpisodeKey(run_id, SCENARIO, instance_id, players),
        now,
        player_model=player_model,
        partner_model=partner_model,
        metadata={"game": game, "experiment": experiment, "turn_scores": scores.get("turn scores", {})},
        scores=_numeric_scores(episode_scores, players),
    )
