"""Persistence of runs, transcripts and verdicts in DuckDB."""

from appliance.store.records import EpisodeRecord, JudgmentRecord, MessageRecord, ModelRecord, RunRecord, ScoreRecord
from appliance.store.store import Store, default_db_path

__all__ = [
    "EpisodeRecord",
    "JudgmentRecord",
    "MessageRecord",
    "ModelRecord",
    "RunRecord",
    "ScoreRecord",
    "Store",
    "default_db_path",
]
