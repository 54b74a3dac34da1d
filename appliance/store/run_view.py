"""A read-only, typed view of one family's part of a stored run.

Families and their reports read the store only through this view, never
through SQL: the schema can change without touching a family, and a staged
family preparing its next stage cannot write anything by mistake.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from appliance.run_config import FamilySettings, stored_family_settings
from appliance.store.labels import get_calibration
from appliance.store.records import CalibrationRecord, StoredRun
from appliance.store.store import Store


@dataclass(frozen=True)
class StoredEpisode:
    episode_id: str
    instance_id: str
    #: the episode's player label: "A" in self-play, "A--B" when B played the partner roles
    player: str
    player_model: str | None
    partner_model: str | None
    status: str
    seed: int
    error: str | None
    metadata: dict[str, Any]

    @property
    def finished(self) -> bool:
        return self.status == "finished"


@dataclass(frozen=True)
class StoredScore:
    episode_id: str
    instance_id: str
    panel: str
    player: str
    metric: str
    value: float | None
    calibrated_value: float | None
    calibration_id: str | None


@dataclass(frozen=True)
class StoredVerdict:
    episode_id: str
    panel: str
    judge: str
    mode: str
    criterion: str
    score: float | None
    parsed: bool


@dataclass(frozen=True)
class StoredMessage:
    episode_id: str
    instance_id: str
    player: str
    idx: int
    speaker: str
    text: str
    finish_reason: str
    #: what the model read to write it (0 for a message no model wrote)
    prompt_tokens: int = 0


class RunView:
    """What a family may read of run `run_id`: its own episodes, scores, verdicts and messages."""

    def __init__(self, store: Store, run_id: str, scenario: str) -> None:
        self._store = store
        self.run_id = run_id
        self.scenario = scenario
        self._stored_run: StoredRun | None = None

    @property
    def _run(self) -> StoredRun:
        """The run's row, read when first needed: a new run's first stage is prepared before it is stored."""
        if self._stored_run is None:
            self._stored_run = self._store.run(self.run_id)
        return self._stored_run

    @property
    def status(self) -> str:
        return self._run.status

    @property
    def where(self) -> str:
        """The store's file, for messages about this run."""
        return str(self._store.path)

    @property
    def run_scenarios(self) -> list[str]:
        """Every scenario spec the run played (this family's among them)."""
        return list(self._run.scenarios)

    def sibling(self, scenario: str) -> RunView:
        """The view of another scenario of the same run (a later stage reading an earlier one's output)."""
        return RunView(self._store, self.run_id, scenario)

    def calibration(self, calibration_id: str) -> CalibrationRecord:
        """A calibration the run's scores were calibrated with (its report describes it)."""
        return get_calibration(self._store, calibration_id)

    @property
    def config(self) -> dict[str, Any]:
        """The run's stored configuration (players, panel, seed, limits, ...)."""
        return dict(self._run.config)

    def family_settings(self) -> FamilySettings:
        """This scenario's own settings in the run: the options set for it and the snapshot of what its
        family resolved when the run started (a run stored before they were one field is read alike)."""
        return FamilySettings.model_validate(stored_family_settings(self._run.config).get(self.scenario, {}))

    @property
    def panel(self) -> str:
        """The name of the panel the run was played with."""
        return str(self._run.config["panel"]["name"])

    def scored_panels(self) -> list[str]:
        """Every panel (and the rules) that stored scores in this run, in name order."""
        rows = self._store.query("SELECT DISTINCT panel FROM scores WHERE run_id = ? ORDER BY 1", [self.run_id])
        return [str(row[0]) for row in rows]

    def episodes(self, *, finished_only: bool = False, instance_prefix: str = "") -> list[StoredEpisode]:
        """The family's episodes in instance order; `instance_prefix` picks a stage (e.g. "collect/")."""
        rows = self._store.query(
            "SELECT episode_id, instance_id, player, player_model, partner_model, status, seed, error, metadata "
            "FROM episodes WHERE run_id = ? AND scenario = ? AND starts_with(instance_id, ?) "
            + ("AND status = 'finished' " if finished_only else "")
            + "ORDER BY instance_id, episode_id",
            [self.run_id, self.scenario, instance_prefix],
        )
        return [
            StoredEpisode(
                episode_id=str(episode_id),
                instance_id=str(instance_id),
                player=str(player),
                player_model=player_model,
                partner_model=partner_model,
                status=str(status),
                seed=int(seed),
                error=error,
                metadata=json.loads(metadata) if metadata else {},
            )
            for episode_id, instance_id, player, player_model, partner_model, status, seed, error, metadata in rows
        ]

    def scores(
        self, *, panels: Sequence[str] | None = None, metrics: Sequence[str] | None = None, finished_only: bool = True
    ) -> list[StoredScore]:
        """Scores of the family's episodes, optionally of some panels and metrics only."""
        rows = self._store.query(
            "SELECT s.episode_id, e.instance_id, s.panel, s.player, s.metric, s.value, s.calibrated_value, "
            "s.calibration_id FROM scores s JOIN episodes e USING (episode_id) "
            "WHERE e.run_id = ? AND e.scenario = ? "
            + ("AND e.status = 'finished' " if finished_only else "")
            + ("AND list_contains(?, s.panel) " if panels is not None else "")
            + ("AND list_contains(?, s.metric) " if metrics is not None else "")
            + "ORDER BY e.instance_id, s.episode_id",
            [
                self.run_id,
                self.scenario,
                *([list(panels)] if panels is not None else []),
                *([list(metrics)] if metrics is not None else []),
            ],
        )
        return [
            StoredScore(str(e), str(i), str(p), str(player), str(m), value, calibrated, calibration)
            for e, i, p, player, m, value, calibrated, calibration in rows
        ]

    def verdicts(self, *, mode: str | None = None) -> list[StoredVerdict]:
        """Judgments on the family's episodes (of one mode, e.g. "choice" for rule-read answers)."""
        rows = self._store.query(
            "SELECT j.episode_id, j.panel, j.judge, j.mode, j.criterion, j.score, j.parsed "
            "FROM judgments j JOIN episodes e USING (episode_id) WHERE e.run_id = ? AND e.scenario = ? "
            + ("AND j.mode = ? " if mode is not None else "")
            + "ORDER BY j.episode_id, j.target_idx",
            [self.run_id, self.scenario, *([mode] if mode is not None else [])],
        )
        return [
            StoredVerdict(str(e), str(p), str(j), str(m), str(c), score, bool(parsed))
            for e, p, j, m, c, score, parsed in rows
        ]

    def messages(
        self, *, speaker: str | None = None, finished_only: bool = False, instance_prefix: str = ""
    ) -> list[StoredMessage]:
        """Messages of the family's episodes in episode and turn order."""
        rows = self._store.query(
            "SELECT m.episode_id, e.instance_id, e.player, m.idx, m.speaker, m.text, m.finish_reason, "
            "coalesce(m.prompt_tokens, 0) "
            "FROM messages m JOIN episodes e USING (episode_id) "
            "WHERE e.run_id = ? AND e.scenario = ? AND starts_with(e.instance_id, ?) "
            + ("AND m.speaker = ? " if speaker is not None else "")
            + ("AND e.status = 'finished' " if finished_only else "")
            + "ORDER BY e.instance_id, m.episode_id, m.idx",
            [self.run_id, self.scenario, instance_prefix, *([speaker] if speaker is not None else [])],
        )
        return [
            StoredMessage(str(e), str(i), str(p), int(idx), str(s), str(t), str(f), int(n))
            for e, i, p, idx, s, t, f, n in rows
        ]
