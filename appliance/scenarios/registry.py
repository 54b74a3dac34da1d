"""The families the appliance knows, by name."""

from __future__ import annotations

from pathlib import Path

from appliance.errors import ApplianceError
from appliance.paths import judges_dir, scenarios_dir
from appliance.scenarios.base import Family
from appliance.store import Store


def family_names() -> list[str]:
    return ["pingpong", "simulatebench", "clembench", "simulbench", "deepeval"]


def load_family(
    spec: str,
    scenarios_root: Path | None = None,
    judges_root: Path | None = None,
    *,
    seed: int = 0,
    store: Store | None = None,
) -> Family:
    """`NAME` uses the family's own data; `NAME:FOLDER` uses another folder (e.g. imported data).

    clembench generates fresh instances from `seed`; `clembench:SOURCE` plays
    an instance-set file, clembench's published instances, or a set stored in `store`.
    """
    root = scenarios_root or scenarios_dir()
    judges = judges_root or judges_dir()
    name, _, folder = spec.partition(":")
    if name == "clembench":
        from appliance.scenarios.clembench.family import load_clembench

        return load_clembench(spec, root / "clembench", seed=seed, store=store)
    if name == "simulbench":
        from appliance.scenarios.simulbench.family import load_simulbench

        return load_simulbench(spec, root / "simulbench", judges, store=store)
    if name == "deepeval":
        from appliance.scenarios.deepeval.family import load_deepeval

        return load_deepeval(spec, root / "deepeval", judges, seed=seed)
    if name == "pingpong":
        from appliance.scenarios.pingpong import PingPongFamily

        data = Path(folder) if folder else root / "pingpong"
        if not data.is_dir():
            raise ApplianceError(f"scenario '{spec}': data folder {data} not found")
        family = PingPongFamily.load(data, judges, prompts_folder=root / "pingpong")
        family.name = spec
        return family
    if name == "simulatebench":
        from appliance.scenarios.simulatebench.family import SimulateBenchFamily

        data = Path(folder) if folder else root / "simulatebench"
        if not data.is_dir():
            raise ApplianceError(f"scenario '{spec}': data folder {data} not found")
        simulate = SimulateBenchFamily.load(data, prompts_folder=root / "simulatebench")
        simulate.name = spec
        return simulate
    raise ApplianceError(f"unknown scenario '{name}' (known: {', '.join(family_names())})")
