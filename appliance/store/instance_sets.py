"""Instance sets in the store: generated or imported instances that runs can replay by name.

A stored set never changes: a run names it in its config, so writing the same
name again is allowed only with the same instances.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from appliance.errors import ApplianceError
from appliance.store.journal import INSTANCE_SETS
from appliance.store.store import Store


def write_instance_set(
    store: Store,
    *,
    name: str,
    family: str,
    source: str,
    seed: int | None,
    count: int,
    payload: dict[str, Any],
    created_at: datetime | None = None,
) -> bool:
    """Store a set; False when the identical set is already there."""
    text = json.dumps(payload, sort_keys=True)
    created_at = created_at or datetime.now(UTC).replace(tzinfo=None)
    with store.transaction():
        existing = store.query("SELECT payload FROM instance_sets WHERE name = ?", [name])
        if existing:
            if json.dumps(json.loads(existing[0][0]), sort_keys=True) == text:
                return False
            raise ApplianceError(f"{store.path}: instance set '{name}' is already stored with other instances")
        store.journal_append(
            INSTANCE_SETS,
            "instance_set",
            {
                "name": name,
                "family": family,
                "source": source,
                "seed": seed,
                "count": count,
                "payload": payload,
                "created_at": created_at.isoformat(),
            },
        )
        store.connection.execute(
            "INSERT INTO instance_sets VALUES (?, ?, ?, ?, ?, ?, ?)",
            [name, family, source, seed, created_at, count, text],
        )
    return True


def load_instance_set(store: Store, name: str) -> dict[str, Any] | None:
    rows = store.query("SELECT payload FROM instance_sets WHERE name = ?", [name])
    return json.loads(rows[0][0]) if rows else None


def instance_set_summaries(store: Store) -> list[dict[str, Any]]:
    rows = store.query(
        "SELECT name, family, source, seed, created_at, instance_count FROM instance_sets ORDER BY created_at"
    )
    keys = ("name", "family", "source", "seed", "created_at", "instances")
    return [dict(zip(keys, row, strict=True)) for row in rows]
