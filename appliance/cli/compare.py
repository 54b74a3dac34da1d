"""`appliance compare BASE CANDIDATE`: the nightly regression gate (exit 0 fine, 1 regression, 2 bad input).

`appliance compare RUN --sweep NAME` compares every checkpoint of a sweep with its base in one test family.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from appliance.cli.options import DbOption, JsonOption, console, split_values
from appliance.compare.gate import DEFAULT_ALPHA, Comparison, Thresholds, compare_runs
from appliance.compare.render import comparison_markdown, print_comparison, print_sweep, sweep_markdown
from appliance.compare.sweep import SweepResult, compare_sweep
from appliance.errors import ApplianceError
from appliance.store import Store

REGRESSION_EXIT = 1

BaseArgument = Annotated[str, typer.Argument(help="the baseline run id (e.g. a pinned run of the base model)")]
CandidateArgument = Annotated[
    str | None, typer.Argument(help="the run to check against it (with --sweep: default BASE itself)")
]
MaxDropOption = Annotated[
    list[str] | None,
    typer.Option("--max-drop", help="allowed drop: METRIC=NUMBER (e.g. pingpong.final=0.3) or NUMBER for every metric"),
]
ThresholdsOption = Annotated[
    Path | None, typer.Option("--thresholds", help="regression.toml: default_max_drop and [max_drop] per metric")
]
PairOption = Annotated[
    list[str] | None, typer.Option("--pair", help="BASE_PLAYER=CANDIDATE_PLAYER where the players' names differ")
]
SweepOption = Annotated[
    str | None, typer.Option(help="every checkpoint of this sweep against its base, Holm across all of them")
]
CheckpointOption = Annotated[
    str | None,
    typer.Option(help="with --sweep: the checkpoint whose regression exits 1 (name or step; default the last)"),
]
ForceOption = Annotated[bool, typer.Option("--force", help="compare runs whose judges or instances differ")]
ResamplesOption = Annotated[int, typer.Option(min=100, help="bootstrap resamples")]
AlphaOption = Annotated[
    float, typer.Option(help="family-wise false-alarm rate of the comparison (Holm across its metrics)")
]
MarkdownOption = Annotated[bool, typer.Option("--markdown", help="print a Markdown table (for a CI comment)")]


def compare(
    base: BaseArgument,
    candidate: CandidateArgument = None,
    max_drop: MaxDropOption = None,
    thresholds_file: ThresholdsOption = None,
    pair: PairOption = None,
    sweep: SweepOption = None,
    checkpoint: CheckpointOption = None,
    force: ForceOption = False,
    resamples: ResamplesOption = 2000,
    seed: Annotated[int, typer.Option(help="bootstrap seed")] = 0,
    alpha: AlphaOption = DEFAULT_ALPHA,
    markdown: MarkdownOption = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Pair two runs' episodes and test every family's headline metrics for a regression."""
    if candidate is None and sweep is None:
        raise ApplianceError("compare: give the CANDIDATE run (or --sweep NAME to compare a sweep with its base)")
    if sweep is None and checkpoint is not None:
        raise ApplianceError("--checkpoint: only with --sweep")
    pairs = _player_pairs(pair)
    if sweep is not None and pairs:
        raise ApplianceError("--pair: a sweep pairs every checkpoint with its base itself")
    thresholds = Thresholds.load(thresholds_file, list(max_drop or []))
    candidate_run = candidate or base
    with Store.open(db, read_only=True) as store:
        for run_id in dict.fromkeys((base, candidate_run)):
            if not store.has_run(run_id):
                raise ApplianceError(f"{store.path}: no run '{run_id}'")
        if sweep is not None:
            result = compare_sweep(
                store, base, candidate_run, sweep, thresholds, checkpoint=checkpoint, force=force,
                resamples=resamples, seed=seed, alpha=alpha,
            )  # fmt: skip
            regressed = bool(result.gate_regressions)
        else:
            comparison = compare_runs(
                store, base, candidate_run, thresholds, pairs=pairs or None, force=force,
                resamples=resamples, seed=seed, alpha=alpha,
            )  # fmt: skip
            regressed = bool(comparison.regressions)
    if sweep is not None:
        _show_sweep(result, as_json=as_json, markdown=markdown)
    else:
        _show_comparison(comparison, as_json=as_json, markdown=markdown)
    if regressed:
        raise typer.Exit(REGRESSION_EXIT)


def _player_pairs(pair: list[str] | None) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in split_values(pair):
        base_player, sep, candidate_player = item.partition("=")
        if not sep or not base_player or not candidate_player:
            raise ApplianceError(f"--pair: '{item}' is not BASE_PLAYER=CANDIDATE_PLAYER")
        pairs[base_player] = candidate_player
    return pairs


def _show_comparison(comparison: Comparison, *, as_json: bool, markdown: bool) -> None:
    if as_json:
        print(json.dumps({**comparison.model_dump(), "regressions": len(comparison.regressions)}, default=str))
    elif markdown:
        print(comparison_markdown(comparison))
    else:
        print_comparison(console, comparison)


def _show_sweep(result: SweepResult, *, as_json: bool, markdown: bool) -> None:
    if as_json:
        print(json.dumps(result.as_json()))
    elif markdown:
        print(sweep_markdown(result))
    else:
        print_sweep(console, result)
