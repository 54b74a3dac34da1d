"""The DeepEval report: the paper's tables from the stored run.

- payoff per model (symmetric tasks) and per model and role (asymmetric), each
  mean with its interval, n, and whether the stableness rule holds;
- the repetitions each task needed under that rule;
- the chains by early and late position (the paper's Tables 1-2: wins and hits
  of the seat that moved first against the one that moved second);
- opponent x role matrices of the asymmetric tasks;
- translation per language pair.

Everything is read from the store, the rules from the settings stored with
the run (a run from before settings were stored falls back to the files as
they are now, and says so).
"""

from __future__ import annotations

from collections import defaultdict
from statistics import mean, quantiles
from typing import Literal

from pydantic import BaseModel

from appliance.scenarios.base import RULE_SCORER
from appliance.scenarios.deepeval.family import DeepEvalFamily
from appliance.scenarios.deepeval.payoffs import metric_samples, payoff_samples, stability, task_of
from appliance.scenarios.deepeval.settings import DeepEvalSettings, Repetitions
from appliance.scenarios.deepeval.tasks import PayoffKind, TaskSpec, public_goods_seats, task_specs
from appliance.scenarios.registry import load_family
from appliance.store.run_view import RunView, StoredEpisode, StoredScore
from appliance.util.stats import bootstrap_interval

CHAIN_TASKS = ("idiom_chain", "word_chain")


class PayoffCell(BaseModel):
    mean: float | None
    ci: tuple[float, float] | None
    n: int
    stable: bool
    kind: PayoffKind
    #: the interval's half-width and the widest the rule allows (tolerance x range)
    half_width: float | None = None
    limit: float = 0.0
    #: the spread over games as the paper shows it (its box plots, and the range from the least to the
    #: most a model won): minimum, lower quartile, median, upper quartile, maximum
    spread: tuple[float, float, float, float, float] | None = None


class PayoffRow(BaseModel):
    task: str
    title: str
    model: str
    #: "player" in symmetric tasks; the role (programmer, reviewer, ...) in asymmetric ones
    role: str
    payoff: PayoffCell
    #: further per-episode means, e.g. rule violations, valid moves, the judges' rating of the code
    extras: dict[str, float | None]


class TaskRepetitions(BaseModel):
    task: str
    repetitions: int
    episodes: int
    failed: int
    stable: bool
    #: how its payoffs' stability is judged
    rule: str


class ChainPositions(BaseModel):
    """One ordered pairing of a chain game: the model that moved first (early) against the one that moved second."""

    task: str
    early: str
    late: str
    games: int
    early_win: float
    late_win: float
    early_hits: float
    late_hits: float


class ChainMarginal(BaseModel):
    """A model's mean score in each position of a chain game over its opponents: the paper's s̄_E
    (row means of Tables 1-2) and s̄_L (column means). None where the model never sat there."""

    task: str
    model: str
    early_win: float | None
    late_win: float | None
    early_hits: float | None
    late_hits: float | None


class RoleMatrixCell(BaseModel):
    """An asymmetric task's payoffs when `models[0]` plays `roles[0]` and `models[1]` plays `roles[1]`."""

    task: str
    roles: tuple[str, str]
    models: tuple[str, str]
    n: int
    #: role -> mean payoff of the model in that role (None where no value is stored)
    payoffs: dict[str, float | None]


class LanguagePairRow(BaseModel):
    pair: str
    model: str
    role: str
    mean: float | None
    ci: tuple[float, float] | None
    n: int


class DeepEvalReport(BaseModel):
    kind: Literal["deepeval"] = "deepeval"
    run_id: str
    scenario: str
    status: str
    panel: str
    symmetric: list[PayoffRow]
    asymmetric: list[PayoffRow]
    repetitions: list[TaskRepetitions]
    chain_positions: list[ChainPositions] = []
    chain_marginals: list[ChainMarginal] = []
    role_matrices: list[RoleMatrixCell] = []
    translation_pairs: list[LanguagePairRow] = []
    #: how the public goods game seated the run's models
    public_goods_seating: str = ""
    #: judges of the panel that are also players in the run: their ratings include their own outputs
    self_judging: list[str] = []
    #: the run left each judge's verdicts on its own outputs out (--exclude-self-judging)
    excluded_self_judging: bool = False
    #: the panel's ratings that did not parse (left out of the means)
    unparsed_ratings: int = 0
    #: the code review's code ran without kernel isolation (--unsafe-code-execution)
    unsafe_code_execution: bool = False
    #: the stableness rule the run used
    tolerance: float
    confidence: float
    #: where the rules came from: "run" (stored with it) or "files" (the files as they are now)
    settings_source: Literal["run", "files"] = "run"


def run_settings(run: RunView, scenario: str) -> tuple[DeepEvalSettings, Literal["run", "files"]]:
    """The settings the run played with, or (for a run that did not store them) the files as they are now."""
    stored = run.sibling(scenario).family_settings().snapshot
    if stored:
        return DeepEvalSettings.model_validate(stored), "run"
    family = load_family(scenario, seed=int(run.config["seed"]))
    assert isinstance(family, DeepEvalFamily)
    return family.data.settings, "files"


def build_deepeval_report(run: RunView, panel: str | None = None) -> DeepEvalReport:
    panel_name = panel or run.panel
    settings, source = run_settings(run, run.scenario)
    players = list(run.config.get("players", []))
    specs = task_specs(settings.public_goods, len(players))
    rule = settings.repetitions
    samples = metric_samples(run, panel_name)
    rows = _payoff_rows(specs, samples, rule)
    symmetric_tasks = {spec.id for spec in specs if spec.symmetric}
    episodes = run.episodes()
    positions = chain_positions(episodes)
    scores = run.scores(panels=[RULE_SCORER, panel_name])
    return DeepEvalReport(
        run_id=run.run_id,
        scenario=run.scenario,
        status=run.status,
        panel=panel_name,
        symmetric=[row for row in rows if row.task in symmetric_tasks],
        asymmetric=[row for row in rows if row.task not in symmetric_tasks],
        repetitions=_repetitions(episodes, rows, specs),
        chain_positions=positions,
        chain_marginals=chain_marginals(positions),
        role_matrices=role_matrices(episodes, scores, specs),
        translation_pairs=translation_pairs(episodes, scores, specs),
        public_goods_seating=_seating(settings, players),
        self_judging=_self_judging(run, panel_name),
        excluded_self_judging=bool(run.config.get("exclude_self_judging", False)),
        unparsed_ratings=sum(1 for v in run.verdicts() if v.panel == panel_name and not v.parsed),
        unsafe_code_execution=bool(run.config.get("unsafe_code_execution", False)),
        tolerance=rule.tolerance,
        confidence=rule.confidence,
        settings_source=source,
    )


def _payoff_rows(
    specs: list[TaskSpec], samples: dict[tuple[str, str, str], list[float]], rule: Repetitions
) -> list[PayoffRow]:
    """Each task's payoff per model and role, judged for stability under the repetition rule."""
    payoffs = payoff_samples(samples, specs)
    rows: list[PayoffRow] = []
    for spec in specs:
        for (task, model, role), values in sorted(payoffs.items()):
            if task != spec.id:
                continue
            payoff = spec.payoffs[role]
            judged = stability(values, payoff, rule)
            extras = {metric: _mean(samples.get((task, model, metric), [])) for metric in spec.extras.get(role, ())}
            cell = PayoffCell(
                mean=_mean(values),
                ci=judged.interval,
                n=len(values),
                stable=judged.stable,
                kind=payoff.kind,
                half_width=judged.half_width,
                limit=judged.limit,
                spread=five_numbers(values),
            )
            rows.append(PayoffRow(task=task, title=spec.title, model=model, role=role, payoff=cell, extras=extras))
    return rows


def five_numbers(values: list[float]) -> tuple[float, float, float, float, float] | None:
    """Minimum, quartiles (inclusive, as a box plot of these games draws them) and maximum."""
    if not values:
        return None
    if len(values) == 1:
        return (values[0],) * 5
    low, middle, high = quantiles(values, n=4, method="inclusive")
    return (min(values), low, middle, high, max(values))


def chain_positions(episodes: list[StoredEpisode]) -> list[ChainPositions]:
    """Per chain task and ordered pairing: win rate (a draw counts half) and valid moves of each position.
    The first seat ("Player 1") answers the opening, so it is the early position."""
    games: dict[tuple[str, str, str], list[tuple[float, float, float, float]]] = defaultdict(list)
    for episode in episodes:
        task, meta = task_of(episode.instance_id), episode.metadata
        if task not in CHAIN_TASKS or not episode.finished or "seat_payoffs" not in meta:
            continue
        early, late = "Player 1", "Player 2"
        seats, won, hits = meta["seats"], meta["seat_payoffs"], meta["seat_hits"]
        games[(task, seats[early], seats[late])].append((won[early], won[late], hits[early], hits[late]))
    return [
        ChainPositions(
            task=task,
            early=early,
            late=late,
            games=len(results),
            early_win=mean(r[0] for r in results),
            late_win=mean(r[1] for r in results),
            early_hits=mean(r[2] for r in results),
            late_hits=mean(r[3] for r in results),
        )
        for (task, early, late), results in sorted(games.items())
    ]


def chain_marginals(positions: list[ChainPositions]) -> list[ChainMarginal]:
    """Per chain task and model: the unweighted mean over its opponents of its early scores (s̄_E) and of
    its late scores (s̄_L), as in the paper's Tables 1-2. Self-play (the paper's empty diagonal) is left out."""
    early: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    late: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for cell in positions:
        if cell.early == cell.late:
            continue
        early[(cell.task, cell.early)].append((cell.early_win, cell.early_hits))
        late[(cell.task, cell.late)].append((cell.late_win, cell.late_hits))

    def means(cells: list[tuple[float, float]]) -> tuple[float | None, float | None]:
        return (mean(c[0] for c in cells), mean(c[1] for c in cells)) if cells else (None, None)

    marginals = []
    for task, model in sorted({*early, *late}):
        early_win, early_hits = means(early.get((task, model), []))
        late_win, late_hits = means(late.get((task, model), []))
        marginals.append(
            ChainMarginal(
                task=task,
                model=model,
                early_win=early_win,
                late_win=late_win,
                early_hits=early_hits,
                late_hits=late_hits,
            )
        )
    return marginals


def _role_payoffs(
    episodes: list[StoredEpisode], scores: list[StoredScore], spec: TaskSpec
) -> list[tuple[StoredEpisode, dict[str, str], dict[str, float | None]]]:
    """Each finished episode of an asymmetric task: role -> model, and role -> that model's payoff."""
    by_episode: dict[str, dict[tuple[str, str], float | None]] = defaultdict(dict)
    for score in scores:
        by_episode[score.episode_id][(score.player, score.metric)] = score.value
    found = []
    for episode in episodes:
        if task_of(episode.instance_id) != spec.id or not episode.finished:
            continue
        seats = {seat.lower(): model for seat, model in episode.metadata.get("seats", {}).items()}
        if not all(role in seats for role in spec.roles):
            continue
        values = by_episode.get(episode.episode_id, {})
        payoffs = {role: values.get((seats[role], spec.payoffs[role].metric)) for role in spec.roles}
        found.append((episode, {role: seats[role] for role in spec.roles}, payoffs))
    return found


def role_matrices(
    episodes: list[StoredEpisode], scores: list[StoredScore], specs: list[TaskSpec]
) -> list[RoleMatrixCell]:
    """Opponent x role: for every (first-role model, second-role model), each role's mean payoff."""
    cells: list[RoleMatrixCell] = []
    for spec in (s for s in specs if not s.symmetric):
        first, second = spec.roles
        grouped: dict[tuple[str, str], list[dict[str, float | None]]] = defaultdict(list)
        for _, models, payoffs in _role_payoffs(episodes, scores, spec):
            grouped[(models[first], models[second])].append(payoffs)
        for (model_a, model_b), payoffs_list in sorted(grouped.items()):
            means = {role: _mean([v for p in payoffs_list if (v := p[role]) is not None]) for role in (first, second)}
            cells.append(
                RoleMatrixCell(
                    task=spec.id, roles=(first, second), models=(model_a, model_b), n=len(payoffs_list), payoffs=means
                )
            )
    return cells


def translation_pairs(
    episodes: list[StoredEpisode], scores: list[StoredScore], specs: list[TaskSpec]
) -> list[LanguagePairRow]:
    """Translation per language pair (as stored with each episode), per model and role."""
    spec = next(s for s in specs if s.id == "translation")
    values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for episode, models, payoffs in _role_payoffs(episodes, scores, spec):
        pair = str(episode.metadata.get("pair", "unknown"))
        for role, value in payoffs.items():
            if value is not None:
                values[(pair, models[role], role)].append(value)
    return [
        LanguagePairRow(
            pair=pair,
            model=model,
            role=role,
            mean=mean(found),
            ci=bootstrap_interval(found) if len(found) >= 2 else None,
            n=len(found),
        )
        for (pair, model, role), found in sorted(values.items())
    ]


def _seating(settings: DeepEvalSettings, players: list[str]) -> str:
    seats = public_goods_seats(settings.public_goods, len(players))
    if len(players) >= 3:
        return f"all {len(players)} models play one game, one seat each (seat order shuffled per repetition)"
    if len(players) == 2:
        return (
            f"2 models alternate over {seats} seats (the paper seats N different models); "
            f"a model's payoff is the mean of its {seats // 2} seats"
        )
    return f"self-play: one model in all {seats} seats"


def _self_judging(run: RunView, panel: str) -> list[str]:
    """The run's players that also judge in its panel (known for the panel the run was played with)."""
    config_panel = run.config.get("panel", {})
    if config_panel.get("name") != panel:
        return []
    return sorted(set(config_panel.get("judges", [])) & set(run.config.get("players", [])))


def _mean(values: list[float]) -> float | None:
    return mean(values) if values else None


def _rule_text(spec: TaskSpec) -> str:
    kinds = {payoff.kind for payoff in spec.payoffs.values()}
    return " and ".join(sorted("Wilson interval (outcome)" if k == "outcome" else "bootstrap (amount)" for k in kinds))


def _repetitions(episodes: list[StoredEpisode], rows: list[PayoffRow], specs: list[TaskSpec]) -> list[TaskRepetitions]:
    """Per task: repetitions and episodes played, and stable when every payoff row of it is."""
    repetitions: dict[str, set[str]] = defaultdict(set)
    played: dict[str, int] = defaultdict(int)
    failed: dict[str, int] = defaultdict(int)
    for episode in episodes:
        task = task_of(episode.instance_id)
        repetitions[task].add(episode.instance_id)
        played[task] += 1
        failed[task] += not episode.finished
    return [
        TaskRepetitions(
            task=spec.id,
            repetitions=len(repetitions[spec.id]),
            episodes=played[spec.id],
            failed=failed[spec.id],
            stable=any(row.task == spec.id for row in rows)
            and all(row.payoff.stable for row in rows if row.task == spec.id),
            rule=_rule_text(spec),
        )
        for spec in specs
        if played[spec.id]
    ]
