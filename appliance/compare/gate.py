"""`appliance compare BASE CANDIDATE`: every family's headline metrics, paired, as a regression gate.

Units are paired by family, instance and player (players are matched by name, or one to one when
each run has a single player, or as `--pair BASE=CANDIDATE` says). Each metric is tested one-sided
against "it dropped by no more than max_drop" with a paired sign-flip test, and Holm's adjustment across
every metric of the comparison keeps the chance that a comparison of two equal models reports any
regression at most alpha (docs/regression.md measures it). Runs judged by other judges, calibrated
differently, or played on other instances are refused unless forced, and then every difference is
listed with the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field

from appliance.compare.paired import paired_difference
from appliance.errors import ApplianceError, describe_validation_error
from appliance.headline import Headline, Unit
from appliance.judging.evidence import separation
from appliance.scenario_spec import family_of
from appliance.scenarios.registry import family_entry
from appliance.store import Store
from appliance.store.run_view import RunView
from appliance.util.stats import holm_adjusted
from appliance.util.tomlfile import read_toml

#: the default family-wise false-alarm rate of one comparison
DEFAULT_ALPHA = 0.05
REGRESSION, IMPROVEMENT, NO_CHANGE, INSUFFICIENT = "regression", "improvement", "no change", "insufficient evidence"


class Thresholds(BaseModel):
    """regression.toml: how far each metric may drop before the gate fails."""

    model_config = ConfigDict(extra="forbid")

    default_max_drop: float = Field(default=0.0, ge=0.0)
    #: per metric, named `family.metric` (e.g. "pingpong.final")
    max_drop: dict[str, float] = Field(default_factory=dict)

    def for_metric(self, name: str) -> float:
        return self.max_drop.get(name, self.default_max_drop)

    @classmethod
    def load(cls, path: Path | None, overrides: list[str]) -> Thresholds:
        thresholds = cls()
        if path is not None:
            try:
                thresholds = cls(**read_toml(path, "regression thresholds"))
            except ValidationError as error:
                raise ApplianceError(describe_validation_error(path, error)) from None
        for item in overrides:
            name, sep, value = item.rpartition("=")
            try:
                drop = float(value)
            except ValueError:
                raise ApplianceError(f"--max-drop: '{item}' is not METRIC=NUMBER or NUMBER") from None
            if drop < 0:
                raise ApplianceError(f"--max-drop: '{item}' is negative")
            if sep:
                thresholds.max_drop[name] = drop
            else:
                thresholds.default_max_drop = drop
        return thresholds


class MetricComparison(BaseModel):
    family: str
    metric: str
    base_player: str
    candidate_player: str
    higher_is_better: bool
    base: float | None
    candidate: float | None
    delta: float | None
    #: the (1 - alpha) paired bootstrap interval of the difference
    ci: tuple[float, float] | None
    #: one-sided sign-flip p-values: against "dropped by at most max_drop", and against "did not rise"
    p_regression: float | None
    p_improvement: float | None
    #: the same after Holm's adjustment across the comparison's metrics; a verdict compares them with alpha
    p_regression_holm: float | None = None
    p_improvement_holm: float | None = None
    pairs: int
    max_drop: float
    #: regression, improvement, no change (the interval rules out a drop beyond max_drop), or
    #: insufficient evidence (it is too wide to)
    verdict: str = INSUFFICIENT
    description: str = ""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def regression(self) -> bool:
        return self.verdict == REGRESSION


class Comparison(BaseModel):
    base_run: str
    candidate_run: str
    forced: bool
    #: what differs between the runs (judges, calibrations, instances); empty when they match
    differences: list[str]
    alpha: float
    metrics: list[MetricComparison]
    #: one line for each judged metric on which the panel did not separate a base player from its
    #: candidate (`appliance.judging.evidence`): there its verdict cannot rank the two
    blind: list[str] = []

    @property
    def regressions(self) -> list[MetricComparison]:
        return [m for m in self.metrics if m.regression]


def compare_runs(
    store: Store,
    base_run: str,
    candidate_run: str,
    thresholds: Thresholds,
    *,
    pairs: Mapping[str, str] | None = None,
    force: bool = False,
    resamples: int = 2000,
    seed: int = 0,
    alpha: float = DEFAULT_ALPHA,
    headlines: list[tuple[str, Headline, Headline]] | None = None,
) -> Comparison:
    """`headlines`: those of `shared_headlines`, where the caller built them already."""
    if not 0.0 < alpha < 1.0:
        raise ApplianceError(f"--alpha: {alpha} is not between 0 and 1")
    if headlines is None:
        headlines = shared_headlines(store, base_run, candidate_run)
    if not headlines:
        raise ApplianceError(f"runs '{base_run}' and '{candidate_run}' share no family with headline metrics")
    differences = checked_differences(store, base_run, candidate_run, headlines, force=force)
    metrics: list[MetricComparison] = []
    blind: list[str] = []
    for scenario, base, candidate in headlines:
        for base_player, candidate_player in player_pairs(scenario, base, candidate, pairs):
            metrics += compare_players(
                scenario, base, candidate, base_player, candidate_player, thresholds, resamples, seed, alpha
            )
            blind += blind_lines(scenario, base, candidate, base_player, candidate_player)
    comparison = concluded(base_run, candidate_run, metrics, thresholds, alpha, force=force, differences=differences)
    return comparison.model_copy(update={"blind": blind})


def blind_lines(
    scenario: str, base: Headline, candidate: Headline, base_player: str, candidate_player: str
) -> list[str]:
    """Where the panel did not separate the base player's units from the candidate player's, on a judged metric."""
    units = [replace(u, player="base") for u in base.units if u.player == base_player]
    units += [replace(u, player="candidate") for u in candidate.units if u.player == candidate_player]
    players = base_player if base_player == candidate_player else f"{base_player} -> {candidate_player}"
    who = "the base run from the candidate"
    found = []
    for metric in base.metrics:
        if metric.judged_by is not None:
            line = separation(units, metric).blind_line(f"{family_of(scenario)}.{metric.name} ({players})", who)
            found += [line] if line else []
    return found


def checked_differences(
    store: Store, base_run: str, candidate_run: str, headlines: list[tuple[str, Headline, Headline]], *, force: bool
) -> list[str]:
    """What differs between the runs (judges, calibrations, instances, settings); refused unless forced."""
    differences = _setting_differences(store.run(base_run).config, store.run(candidate_run).config)
    for scenario, base, candidate in headlines:
        differences += _unit_differences(scenario, base, candidate)
    if differences and not force:
        raise ApplianceError(
            f"runs '{base_run}' and '{candidate_run}' differ ({'; '.join(differences)}); compare anyway with --force"
        )
    return differences


def concluded(
    base_run: str,
    candidate_run: str,
    metrics: list[MetricComparison],
    thresholds: Thresholds,
    alpha: float,
    *,
    force: bool,
    differences: list[str],
) -> Comparison:
    """The comparison of `metrics`, every verdict decided with Holm's adjustment across all of them."""
    unknown = set(thresholds.max_drop) - {f"{m.family}.{m.metric}" for m in metrics}
    if unknown:
        raise ApplianceError(f"--max-drop: no metric named {', '.join(sorted(unknown))} in these runs")
    decide(metrics, alpha)
    return Comparison(
        base_run=base_run,
        candidate_run=candidate_run,
        forced=force,
        differences=differences,
        alpha=alpha,
        metrics=metrics,
    )


def decide(metrics: list[MetricComparison], alpha: float) -> None:
    """Every metric's verdict, with Holm's adjustment across all of them (one family of tests per
    direction: the gate's false alarms, and the improvements it claims)."""
    regressions = holm_adjusted([m.p_regression for m in metrics])
    improvements = holm_adjusted([m.p_improvement for m in metrics])
    for metric, p_regression, p_improvement in zip(metrics, regressions, improvements, strict=True):
        metric.p_regression_holm, metric.p_improvement_holm = p_regression, p_improvement
        if p_regression is not None and p_regression <= alpha:
            metric.verdict = REGRESSION
        elif p_improvement is not None and p_improvement <= alpha:
            metric.verdict = IMPROVEMENT
        elif metric.ci is not None and (
            metric.ci[0] >= -metric.max_drop if metric.higher_is_better else metric.ci[1] <= metric.max_drop
        ):
            metric.verdict = NO_CHANGE
        else:
            metric.verdict = INSUFFICIENT


def shared_headlines(store: Store, base_run: str, candidate_run: str) -> list[tuple[str, Headline, Headline]]:
    """(scenario, base headline, candidate headline) for each family both runs played that has headlines."""
    base_config, candidate_config = store.run(base_run).config, store.run(candidate_run).config
    found = []
    for scenario in [s for s in base_config.get("scenarios", []) if s in candidate_config.get("scenarios", [])]:
        entry = family_entry(family_of(scenario))
        if entry.headline is not None:
            found.append(
                (
                    scenario,
                    entry.headline(RunView(store, base_run, scenario), None),
                    entry.headline(RunView(store, candidate_run, scenario), None),
                )
            )
    return found


def compare_players(
    scenario: str,
    base: Headline,
    candidate: Headline,
    base_player: str,
    candidate_player: str,
    thresholds: Thresholds,
    resamples: int,
    seed: int,
    alpha: float,
) -> list[MetricComparison]:
    base_units = {u.key: u for u in base.units if u.player == base_player}
    candidate_units = {u.key: u for u in candidate.units if u.player == candidate_player}
    shared = sorted(set(base_units) & set(candidate_units))
    family = family_of(scenario)
    rows = []
    for metric in base.metrics:
        difference = paired_difference(
            [base_units[k] for k in shared],
            [candidate_units[k] for k in shared],
            metric.statistic,
            resamples=resamples,
            confidence=1.0 - alpha,
            seed=seed,
        )
        drop = thresholds.for_metric(f"{family}.{metric.name}")
        if metric.higher_is_better:
            p_regression, p_improvement = difference.p_below(-drop), difference.p_above(0.0)
        else:
            p_regression, p_improvement = difference.p_above(drop), difference.p_below(0.0)
        rows.append(
            MetricComparison(
                family=family,
                metric=metric.name,
                base_player=base_player,
                candidate_player=candidate_player,
                higher_is_better=metric.higher_is_better,
                base=difference.base,
                candidate=difference.candidate,
                delta=difference.delta,
                ci=difference.ci,
                p_regression=p_regression,
                p_improvement=p_improvement,
                pairs=difference.pairs,
                max_drop=drop,
                description=metric.description,
            )
        )
    return rows


def player_pairs(
    scenario: str, base: Headline, candidate: Headline, pairs: Mapping[str, str] | None
) -> list[tuple[str, str]]:
    base_players = sorted({u.player for u in base.units})
    candidate_players = sorted({u.player for u in candidate.units})
    if pairs:
        chosen = [(b, c) for b, c in pairs.items() if b in base_players and c in candidate_players]
        if not chosen:
            raise ApplianceError(f"--pair: no pair names a player of {scenario} in both runs")
        return chosen
    if base_players == candidate_players:
        return [(p, p) for p in base_players]
    if len(base_players) == 1 and len(candidate_players) == 1:
        return [(base_players[0], candidate_players[0])]
    raise ApplianceError(
        f"{scenario}: players differ ({', '.join(base_players)} against {', '.join(candidate_players)}); "
        "name the pairs with --pair BASE=CANDIDATE"
    )


def _setting_differences(base: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    found = []
    base_judges = sorted(base.get("panel", {}).get("judges", []))
    candidate_judges = sorted(candidate.get("panel", {}).get("judges", []))
    if base_judges != candidate_judges:
        found.append(f"judges {', '.join(base_judges)} against {', '.join(candidate_judges)}")
    if base.get("calibrations", {}) != candidate.get("calibrations", {}):
        found.append(f"calibrations {base.get('calibrations', {})} against {candidate.get('calibrations', {})}")
    missing = sorted(set(base.get("scenarios", [])) ^ set(candidate.get("scenarios", [])))
    if missing:
        found.append(f"families played by one run only: {', '.join(missing)}")
    return found


def _unit_differences(scenario: str, base: Headline, candidate: Headline) -> list[str]:
    found = []
    base_keys, candidate_keys = _keys(base.units), _keys(candidate.units)
    if base_keys != candidate_keys:
        only_base, only_candidate = len(base_keys - candidate_keys), len(candidate_keys - base_keys)
        found.append(f"{scenario} instances: {only_base} only in the base run, {only_candidate} only in the candidate")
    for name in sorted(set(base.settings) | set(candidate.settings)):
        if base.settings.get(name) != candidate.settings.get(name):
            found.append(f"{scenario} {name}: {base.settings.get(name)} against {candidate.settings.get(name)}")
    return found


def _keys(units: list[Unit]) -> set[str]:
    return {unit.key for unit in units}
