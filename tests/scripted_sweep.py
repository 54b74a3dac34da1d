"""A checkpoint sweep whose curve is known by construction: scripted PingPong runs through the real
catalog expansion, runner, store and gate.

A models.toml in a folder of its own holds a base and a sweep over empty checkpoint folders (the
scripted backend reads no weights). Every conversation has a quality of its own (2 to 4, from its
card and situation, so base and checkpoints share it as they share an item's difficulty); each judge
score scatters around it by -1, 0 or +1 from the run's sampling stream and the player's own, and a
checkpoint's `lift` moves it: +0.4 raises a score by one point with probability 0.4, -0.6 lowers one
with probability 0.6 (scores stay within 1 to 5). A lift of 0 for every checkpoint is an A/A sweep:
every checkpoint is the base sampled again.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Mapping
from pathlib import Path

from appliance.catalog.models import load_catalog
from appliance.catalog.panels import Panel
from appliance.engine.types import GenerationRequest
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import load_family
from appliance.store import Store
from tests.fakes import Reply, role_of, scripted_factory

BASE, SWEEP = "base", "ft"
#: a judged transcript line: "[3] Name: reply"
_TURN = re.compile(r"^\[\d+\] [^:]+: (.*)$", flags=re.MULTILINE)
_SPEAKER = re.compile(r"^<([^>]+)>")


def sweep_catalog(folder: Path, steps: list[int]) -> Path:
    """A models.toml with a base and a sweep `ft` of one empty checkpoint folder per step."""
    for step in steps:
        (folder / "checkpoints" / f"checkpoint-{step}").mkdir(parents=True, exist_ok=True)
    models = folder / "models.toml"
    base = f'[models.{BASE}]\npath = "base.gguf"\n'
    models.write_text(f'{base}\n[models.{SWEEP}]\nbase = "{BASE}"\nadapters = "checkpoints/checkpoint-*"\n')
    return models


def lifted_model(stream: int, lifts: Mapping[str, float], refusals: float) -> Reply:
    """Player, interrogator and judge of one run; `lifts` maps a player to its lift (absent: 0)."""

    def reply(model: str, request: GenerationRequest) -> str:
        if request.grammar is not None and "turns" in request.grammar:
            text = "\n".join(m.content for m in request.messages)
            replies = _TURN.findall(text)
            speaker = next((found.group(1) for r in replies if (found := _SPEAKER.match(r))), BASE)
            item = hashlib.sha256(_TURN.sub("", text).encode()).hexdigest()
            quality = 2 + int(item[:8], 16) % 3
            rng = random.Random(f"{stream}/{speaker}/{item}")
            lift = lifts.get(speaker, 0.0)
            turns = []
            for _ in replies:
                scores = {}
                for criterion in ("in_character", "entertaining", "fluent"):
                    score = quality + rng.choice((-1, 0, 0, 1))
                    step = rng.random() < abs(lift)
                    score += step if lift > 0 else -step
                    scores[criterion] = min(5, max(1, score))
                turns.append(scores | {"refusal": rng.random() < refusals})
            return json.dumps({"reasoning": "", "turns": turns})
        if role_of(request) == "interrogator":  # names its situation, so each conversation is an item of its own
            situation = hashlib.sha256(request.messages[0].content.encode()).hexdigest()[:8]
            return f"Tell me more ({situation})."
        rng = random.Random(f"{stream}/{model}/{request.sampling.seed}")
        return f"<{model}> An answer" + " that goes on" * rng.randrange(1, 4) + "."

    return reply


def scripted_sweep_run(
    folder: Path,
    db: Path,
    lifts: Mapping[int, float],
    *,
    conversations: int,
    stream: int = 0,
    refusals: float = 0.0,
    seed: int = 5,
    with_base: bool = True,
) -> str:
    """One run of the base (unless not `with_base`) and a checkpoint per step of `lifts` (step -> lift);
    its run id. The base interrogates and judges either way."""
    models = sweep_catalog(folder, sorted(lifts))
    catalog = load_catalog(models)
    by_player = {f"{SWEEP}@checkpoint-{step}": lift for step, lift in lifts.items()}
    config = RunConfig(
        scenarios=["pingpong"],
        players=catalog.expand_sweeps([BASE, SWEEP] if with_base else [SWEEP]),
        interrogator=BASE,
        panel=Panel(name="sweep", judges=[BASE]),
        seed=seed,
        limit=conversations,
        models_file=str(models),
    )
    with Store.open(db) as store:
        runner = Runner(catalog, store, scripted_factory(lifted_model(stream, by_player, refusals)))
        return runner.execute(config, [load_family("pingpong")]).run_id
