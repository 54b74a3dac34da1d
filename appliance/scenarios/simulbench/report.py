"""The SimulBench report: 1-10 ratings per target on a common script set and its hard subset, broken
down as the paper does, the hardest and simplest tasks, the pairwise win/tie/lose table, and what
collection produced.

As in the paper, scripts that every evaluated model answered perfectly are dropped (and counted). Which
scripts are perfect is a property of the script set, decided once by the players of the run that made
it: a run that evaluates a stored run's scripts, or the published ones, applies the set stored with it
(`PERFECT_SCRIPTS` in its family settings) to its own players, so a player's score does not depend on
who else plays. A single player decides nothing: "perfect for every model" would be all its 10s.
Models are compared on the same scripts: a script that some model has no rating for (its episode
failed or no verdict parsed) is left out for every model and counted, never dropped for one model
alone. Intervals resample tasks (a cluster bootstrap): scripts of one task are not independent.
Stateless/stateful is reported on FirstChan scripts, as in the paper. Pairwise rates follow the
paper's table: win, tie and lose as % of the compared scripts, from the first model's point of
view, and delta = win - lose.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from statistics import mean
from typing import Any, Literal

from pydantic import BaseModel

from appliance.engine.backend import did_not_fit
from appliance.judging.scoring_templates import PREFERENCE
from appliance.scenario_spec import family_of
from appliance.scenarios.simulbench.scripts import HARD_KINDS, SCRIPT_KINDS
from appliance.store.run_view import RunView, StoredEpisode
from appliance.util.stats import cluster_bootstrap_interval

#: the rating template's top score: a script every model got this on tells nothing apart
PERFECT = 10.0
#: tasks listed at each end of the hardest/simplest table, per task type (the paper's Table 2)
TASKS_SHOWN = 10
#: a script set's perfect scripts are decided by at least this many players
MIN_PLAYERS_FOR_PERFECT = 2
#: the family settings a run stores when its scripts' perfect set was decided elsewhere
PERFECT_SCRIPTS, PERFECT_DECIDED_BY = "perfect_scripts", "perfect_decided_by"


class Cell(BaseModel):
    mean: float | None
    ci: tuple[float, float] | None
    n: int


class TargetRow(BaseModel):
    player: str
    all: Cell
    hard: Cell
    #: stateless / stateful, on FirstChan scripts (the paper's breakdown)
    by_task_type: dict[str, Cell]
    by_kind: dict[str, Cell]
    by_turn: dict[str, Cell]
    #: scripts without a rating: the episode failed or no judge's verdict parsed
    unrated: int
    #: scripts whose dialogue history did not fit the player's context (not evaluated, not failures)
    not_fitting: int
    #: replies cut by the token cap (finish reason "length")
    cut_replies: int


class TaskRow(BaseModel):
    task: str
    task_type: str
    scripts: int
    #: mean over every model's ratings on the task's common scripts
    mean: float
    by_player: dict[str, float]


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
    simulator: str | None
    user_agent: str | None
    dialogues: int
    mean_turns: float | None
    agent_rejections: int
    #: simulator replies cut by the token cap
    cut_simulator_replies: int
    strategies: dict[str, int]
    scripts: dict[str, int]


class SimulBenchReport(BaseModel):
    kind: Literal["simulbench"] = "simulbench"
    run_id: str
    scenario: str
    status: str
    panel: str
    #: scripts in the comparison: rated for every model and not perfect for all of them
    common_scripts: int
    perfect_dropped: int
    #: whose ratings decided the perfect scripts (this run's players, another run's, the published study)
    perfect_decided_by: str
    #: scripts left out because some model has no rating for them
    incomplete_scripts: int
    rows: list[TargetRow]
    hardest_tasks: list[TaskRow]
    simplest_tasks: list[TaskRow]
    pairs: list[PairRow]
    #: how the comparisons were decided: a calibration's preference and tie band, the panel's raw direct
    #: preference, or the paper's sampled verdicts in both orders
    pairs_decided_by: str = ""
    collection: Collection | None


#: an episode of a stage with its score of one metric (None where it has none)
RatedEpisode = tuple[StoredEpisode, float | None]
#: the metrics whose calibrated value the tables show in place of the raw one
CALIBRATED_IN_TABLES = frozenset({"pair_outcome"})


def _rated(run: RunView, stage: str, metric: str, panel: str) -> list[RatedEpisode]:
    """Each episode of a stage with its value of `metric`: for a comparison's outcome the calibrated one
    where a pairwise calibration decided it, else the raw one (ratings stay on the judges' 1-10 scale,
    which the perfect scripts are read on)."""
    scores = run.scores(panels=[panel], metrics=[metric], finished_only=False)
    calibrated = metric in CALIBRATED_IN_TABLES
    values = {
        s.episode_id: s.calibrated_value if calibrated and s.calibrated_value is not None else s.value for s in scores
    }
    return [(e, values.get(e.episode_id)) for e in run.episodes(instance_prefix=f"{stage}/")]


@dataclass(frozen=True)
class ComparedScripts:
    """The scripts a run's figures are computed on, the one definition the report, `compare` and the
    page share: rated for every evaluated player, less the script set's perfect ones."""

    players: list[str]
    #: script -> its metadata (kind, task, turn, ...)
    scripts: dict[str, dict[str, Any]]
    #: script -> player -> rating
    ratings: dict[str, dict[str, float]]
    #: player -> evaluations that failed or got no rating
    unrated: Counter[str]
    #: player -> evaluations whose script did not fit its context
    not_fitting: Counter[str]
    complete: set[str]
    perfect: set[str]
    perfect_decided_by: str

    @property
    def common(self) -> list[str]:
        return sorted(self.complete - self.perfect)


def compared_scripts(run: RunView, panel: str) -> ComparedScripts:
    evaluated = _rated(run, "evaluate", "rating", panel)
    players = sorted({episode.player for episode, _ in evaluated})
    ratings: dict[str, dict[str, float]] = defaultdict(dict)
    scripts: dict[str, dict[str, Any]] = {}
    unrated: Counter[str] = Counter()
    not_fitting: Counter[str] = Counter()
    for episode, value in evaluated:
        script = str(episode.metadata.get("script", episode.instance_id))
        scripts[script] = episode.metadata
        if not episode.finished and did_not_fit(episode.error):
            not_fitting[episode.player] += 1
        elif not episode.finished or value is None:
            unrated[episode.player] += 1
        else:
            ratings[script][episode.player] = value
    complete = {s for s in scripts if set(ratings[s]) == set(players)}
    stored = run.family_settings().snapshot
    if PERFECT_SCRIPTS in stored:  # decided when the script set was made, by other players
        perfect, decided_by = set(stored[PERFECT_SCRIPTS]) & complete, str(stored.get(PERFECT_DECIDED_BY, "?"))
    elif len(players) < MIN_PLAYERS_FOR_PERFECT:
        perfect, decided_by = set(), f"nobody: run {run.run_id} has one player, and one player decides none"
    else:
        perfect = {s for s in complete if all(v == PERFECT for v in ratings[s].values())}
        decided_by = f"the {len(players)} players of run {run.run_id}"
    return ComparedScripts(players, scripts, dict(ratings), unrated, not_fitting, complete, perfect, decided_by)


def perfect_scripts_of_run(run: RunView) -> dict[str, object]:
    """The perfect scripts of the scripts a stored run extracted, decided by that run's players, as the
    family settings of a later run that evaluates them (see the module docstring). `run`: a view of any
    of that run's scenarios."""
    perfect: set[str] = set()
    deciders: set[str] = set()
    for scenario in run.run_scenarios:
        if family_of(scenario) == "simulbench":
            view = run.sibling(scenario)
            compared = compared_scripts(view, view.panel)
            perfect |= compared.perfect
            deciders.add(compared.perfect_decided_by)
    return {PERFECT_SCRIPTS: sorted(perfect), PERFECT_DECIDED_BY: "; ".join(sorted(deciders))}


def build_simulbench_report(run: RunView, panel: str | None = None) -> SimulBenchReport:
    panel_name = panel or run.panel
    compared = compared_scripts(run, panel_name)
    players, scripts, ratings = compared.players, compared.scripts, compared.ratings
    complete, perfect, common = compared.complete, compared.perfect, compared.common
    messages = run.messages(speaker="player", instance_prefix="evaluate/")
    cut = Counter(m.player for m in messages if m.finish_reason == "length")
    rows = [
        _target_row(
            player,
            [(scripts[s], ratings[s][player]) for s in common],
            (compared.unrated[player], compared.not_fitting[player], cut[player]),
        )
        for player in players
    ]
    tasks = _task_rows(common, scripts, ratings)
    return SimulBenchReport(
        run_id=run.run_id,
        scenario=run.scenario,
        status=run.status,
        panel=panel_name,
        common_scripts=len(common),
        perfect_dropped=len(perfect),
        perfect_decided_by=compared.perfect_decided_by,
        incomplete_scripts=len(scripts) - len(complete),
        rows=rows,
        hardest_tasks=[row for rows in tasks for row in rows[:TASKS_SHOWN]],
        simplest_tasks=[row for rows in tasks for row in reversed(rows[TASKS_SHOWN:][-TASKS_SHOWN:])],
        pairs=_pair_rows(_rated(run, "compare", "pair_outcome", panel_name), dropped=perfect),
        pairs_decided_by=pairs_decided_by(run, panel_name),
        collection=_collection(run),
    )


def _cell(results: list[tuple[dict[str, Any], float]], seed: int = 0) -> Cell:
    values = [value for _, value in results]
    tasks = [str(metadata.get("task", "?")) for metadata, _ in results]
    return Cell(
        mean=mean(values) if values else None, ci=cluster_bootstrap_interval(values, tasks, seed=seed), n=len(values)
    )


def _target_row(player: str, results: list[tuple[dict[str, Any], float]], counts: tuple[int, int, int]) -> TargetRow:
    """`counts`: the player's unrated scripts, scripts that did not fit, and replies cut by the token cap."""
    unrated, not_fitting, cut = counts

    def grouped(key: str, chosen: list[tuple[dict[str, Any], float]], order: tuple[str, ...] = ()) -> dict[str, Cell]:
        groups: dict[str, list[tuple[dict[str, Any], float]]] = defaultdict(list)
        for metadata, value in chosen:
            groups[str(metadata.get(key, "?"))].append((metadata, value))
        names = [n for n in order if n in groups] + sorted(n for n in groups if n not in order)
        return {name: _cell(groups[name]) for name in names}

    first_challenging = [(m, v) for m, v in results if m.get("kind") == "FirstChan"]
    return TargetRow(
        player=player,
        all=_cell(results),
        hard=_cell([(m, v) for m, v in results if m.get("kind") in HARD_KINDS]),
        by_task_type=grouped("task_type", first_challenging, ("stateless", "stateful")),
        by_kind=grouped("kind", results, SCRIPT_KINDS),
        by_turn=grouped("turn", results, tuple(str(t) for t in range(1, 20))),
        unrated=unrated,
        not_fitting=not_fitting,
        cut_replies=cut,
    )


def _task_rows(
    common: list[str], scripts: dict[str, dict[str, Any]], ratings: dict[str, dict[str, float]]
) -> list[list[TaskRow]]:
    """Per task type (stateless, stateful), its tasks from the hardest (lowest mean rating over all
    models) to the simplest: the paper's Table 2 lists the ten hardest and ten simplest of each type."""
    by_task: dict[str, list[str]] = defaultdict(list)
    for script in common:
        by_task[str(scripts[script].get("task", "?"))].append(script)
    rows = []
    for task, own in by_task.items():
        players = sorted({p for s in own for p in ratings[s]})
        rows.append(
            TaskRow(
                task=task,
                task_type=str(scripts[own[0]].get("task_type", "?")),
                scripts=len(own),
                mean=mean(v for s in own for v in ratings[s].values()),
                by_player={p: mean(ratings[s][p] for s in own) for p in players},
            )
        )
    types = sorted({row.task_type for row in rows}, key=lambda kind: (kind != "stateless", kind != "stateful", kind))
    return [sorted((r for r in rows if r.task_type == kind), key=lambda row: (row.mean, row.task)) for kind in types]


def pairs_decided_by(run: RunView, panel: str) -> str:
    """In words, what decided this run's comparisons under `panel` (the pairwise table's title says it):
    read from that panel's own scores and verdicts, so a run judged again by another panel says its own."""
    scores = run.scores(panels=[panel], metrics=["pair_outcome"], finished_only=True)
    ids = sorted({s.calibration_id for s in scores if s.calibration_id is not None})
    if ids:
        record = run.calibration(ids[-1])
        band = record.model.get("tie_band")
        tie = f", a tie within {band:g} of 0" if isinstance(band, int | float) and band > 0 else ""
        return f"the panel's preference calibrated on {record.label_set} ({record.calibration_id}{tie})"
    read = [v for v in run.verdicts(mode="likelihood") if v.panel == panel and v.criterion == PREFERENCE]
    if read:
        return "the panel's direct preference, uncalibrated (a tie only at exactly 0)"
    return "sampled verdicts in both orders; a win needs both"


def pair_outcomes(run: RunView, panel: str) -> list[tuple[str, str, str, float]]:
    """(script, first model, second model, outcome from the first's side) of every decided comparison on
    the scripts the report compares (the perfect ones left out, as in its pairwise table)."""
    dropped = compared_scripts(run, panel).perfect
    found = []
    for episode, value in _rated(run, "compare", "pair_outcome", panel):
        script = str(episode.metadata.get("script"))
        if episode.finished and value is not None and script not in dropped:
            found.append(
                (script, episode.player_model or episode.player, episode.partner_model or episode.player, value)
            )
    return found


def _pair_rows(rows: list[RatedEpisode], dropped: set[str]) -> list[PairRow]:
    outcomes: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    undecided: Counter[tuple[str, str, str]] = Counter()
    for episode, value in rows:
        if str(episode.metadata.get("script")) in dropped:
            continue
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
    simulator_replies = run.messages(speaker="simulator", instance_prefix="collect/")
    return Collection(
        simulator=run.config.get("simulator"),
        user_agent=run.config.get("interrogator"),
        dialogues=len(dialogues),
        mean_turns=mean(len(d.get("turns", [])) for d in dialogues),
        agent_rejections=sum(int(d.get("agent_failures", 0)) for d in dialogues),
        cut_simulator_replies=sum(1 for m in simulator_replies if m.finish_reason == "length"),
        strategies=dict(Counter(s for d in dialogues for s in d.get("strategies", []))),
        scripts={kind: kinds[kind] for kind in SCRIPT_KINDS},
    )
