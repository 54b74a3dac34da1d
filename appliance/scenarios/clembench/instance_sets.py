"""Saving a clembench instance set: to a JSON file, or into the store under its name."""

from __future__ import annotations

from pathlib import Path

from appliance.scenarios.clembench.instances import InstanceSet, write_instance_set
from appliance.store import Store
from appliance.store.instance_sets import write_instance_set as store_instance_set


def save_instance_set(instance_set: InstanceSet, out: Path | None, db: Path | None) -> list[str]:
    """Write the set to `out`, or store it in `db`; returns the lines to print."""
    count = len(instance_set.instances)
    if out is not None:
        write_instance_set(instance_set, out)
        return [f"wrote {count} instances to {out}; play them with --scenario clembench:{out}"]
    with Store.open(db) as store:
        new = store_instance_set(
            store,
            name=instance_set.name,
            family="clembench",
            source=instance_set.source,
            seed=instance_set.seed,
            count=count,
            payload=instance_set.model_dump(mode="json"),
        )
    verb = "stored" if new else "already stored:"
    return [
        f"{verb} {count} instances as '{instance_set.name}'",
        f"play them with: appliance run --scenario clembench:{instance_set.name}",
    ]
