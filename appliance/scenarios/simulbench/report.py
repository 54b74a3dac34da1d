"""The SimulBench report: 1-10 ratings per target on all scripts and the hard subset, broken down by
task type, script kind and turn, the pairwise win/tie/lose table, and what collection produced.

Intervals are percentile bootstraps over scripts. Pairwise rates follow the
paper's table: win, tie and lose as % of the compared scripts, from the first
model's point of view, and delta = win - lose.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import mean
from typing import Any, Literal

from pydantic import BaseModel

from appliance.scenarios.simulbench.scripts import HARD_KINDS, SCRIPT_KINDS
from appliance.stats import bootstrap_interval
from appliance.store import Store
from appliance.store.run_view import RunView, StoredEpisode


class Cell(BaseModel):
    mean: float | None
    ci: tuple[float, float] | None
    n: int


class TargetRow(BaseModel):
    player: str
    all: Cell
    hard: Cell
    by_task_type: dict[str, Cell]
    by_kind: dict[str, Cell]
    by_turn: dict[str, Cell]
    #: scripts without a rating: the episode failed or no judge's verdict parsed
    unrated: int


class PairRow(BaseModel):
    first: str
    second: str
    subset: Literal["all", "hard"]
    compared: int
    win: float
    tie: float
    lose: float
    delta: float
    #: pairs where no judge gave a verdict in both orders
    undecided: int


class Collection(BaseModel):
    dialogues: int
    mean_turns: float | None
    agent_rejections: int
    strategies: dict[str, int]
    scripts: dict[str, int]


class SimulBenchReport(BaseModel):
    kind: Literal["simulbench"] = "simulbench"
    run_id: str
    scenario: str
    status: str
    panel: str
    rows: list[TargetRow]
    pairs: list[PairRow]
    collection: Collection | None


def _cell(values: list[float]) -> Cell:
    return Cell(mean=mean(values) if values else None, ci=bootstrap_interval(values), n=len(values))


#: an episode of a stage with its score of one metric (None where it has none)
RatedEpisode = tuple[StoredEpisode, float | None]


def _rated(run: RunView, stage: str, metric: str, panel: str) -> list[RatedEpisode]:
    values = {s.episode_id: s.value for s in run.scores(panels=[panel], metrics=[metric], finished_only=False)}
    return [(e, values.get(e.episode_id)) for e in run.episodes(instance_prefix=f"{stage}/")]


def build_simulbench_report(store: Store, run_id: str, scenario: str, panel: str | None = None) -> SimulBenchReport:
    run = RunView(store, run_id, scenario)
    panel_name = panel or run.panel
    rated: dict[str, list[tuple[dict[str, Any], float]]] = defaultdict(list)
    unrated: Counter[str] = Counter()
    for episode, value in _rated(run, "evaluate", "rating", panel_name):
        if not episode.finished or value is None:
            unrated[episode.player] += 1
            continue
        rated[episode.player].append((episode.metadata, value))
    rows = [_target_row(player, rated[player], unrated[player]) for player in sorted({*rated, *unrated})]
    return SimulBenchReport(
        run_id=run_id,
        scenario=scenario,
        status=run.status,
        panel=panel_name,
        rows=rows,
        pairs=_pair_rows(_rated(run, "compare", "pair_outcome", panel_name)),
        collection=_collection(run),
    )


def _target_row(player: str, results: list[tuple[dict[str, Any], float]], unrated: int) -> TargetRow:
    def grouped(key: str, order: tuple[str, ...] = ()) -> dict[str, Cell]:
        groups: dict[str, list[float]] = defaultdict(list)
        for metadata, value in results:
            groups[str(metadata.get(key, "?"))].append(value)
        names = [n for n in order if n in groups] + sorted(n for n in groups if n not in order)
        return {name: _cell(groups[name]) for name in names}

    return TargetRow(
        player=player,
        all=_cell([value for _, value in results]),
        hard=_cell([value for metadata, value in results if metadata.get("kind") in HARD_KINDS]),
        by_task_type=grouped("task_type", ("stateless", "stateful")),
        by_kind=grouped("kind", SCRIPT_KINDS),
        by_turn=grouped("turn", tuple(str(t) for t in range(1, 20))),
        unrated=unrated,
    )


def _pair_rows(rows: list[RatedEpisode]) -> list[PairRow]:
    outcomes: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    undecided: Counter[tuple[str, str, str]] = Counter()
    for episode, value in rows:
        first, second = episode.player_model or episode.player, episode.partner_model or episode.player
        subsets = ["all", "hard"] if episode.metadata.get("kind") in HARD_KINDS else ["all"]
        for subset in subsets:
            if not episode.finished or value is None:
                undecided[(first, second, subset)] += 1
            else:
                outcomes[(first, second, subset)].append(value)
    pairs = []
    for key in sorted({*outcomes, *undecided}):
        first, second, subset = key
        values = outcomes[key]
        win, tie, lose = (_percent(values, outcome) for outcome in (1.0, 0.0, -1.0))
        pairs.append(
            PairRow(
                first=first,
                second=second,
                subset="hard" if subset == "hard" else "all",
                compared=len(values),
                win=win,
                tie=tie,
                lose=lose,
                delta=win - lose,
                undecided=undecided[key],
            )
        )
    return pairs


def _percent(values: list[float], outcome: float) -> float:
    return 100.0 * sum(value == outcome for value in values) / len(values) if values else 0.0


def _collection(run: RunView) -> Collection | None:
    dialogues = [e.metadata for e in run.episodes(finished_only=True, instance_prefix="collect/")]
    if not dialogues:
        return None
    extracted = run.episodes(finished_only=True, instance_prefix="extract/")
    kinds = Counter(script["kind"] for e in extracted for script in e.metadata.get("scripts", []))
    return Collection(
        dialogues=len(dialogues),
        mean_turns=mean(len(d.get("turns", [])) for d in dialogues),
        agent_rejections=sum(int(d.get("agent_failures", 0)) for d in dialogues),
        strategies=dict(Counter(s for d in dialogues for s in d.get("strategies", []))),
        scripts={kind: kinds[kind] for kind in SCRIPT_KINDS},
    )
