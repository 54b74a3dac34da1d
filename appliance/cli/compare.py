"""`appliance compare BASE CANDIDATE`: the nightly regression gate (exit 0 fine, 1 regression, 2 bad input)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from appliance.cli.options import DbOption, JsonOption, console, split_values
from appliance.compare.gate import DEFAULT_ALPHA, Thresholds, compare_runs
from appliance.compare.render import comparison_markdown, print_comparison
from appliance.errors import ApplianceError
from appliance.store import Store

REGRESSION_EXIT = 1


def compare(
    base: Annotated[str, typer.Argument(help="the baseline run id (e.g. a pinned run of the base model)")],
    candidate: Annotated[str, typer.Argument(help="the run to check against it")],
    max_drop: Annotated[
        list[str] | None,
        typer.Option(
            "--max-drop", help="allowed drop: METRIC=NUMBER (e.g. pingpong.final=0.3) or NUMBER for every metric"
        ),
    ] = None,
    thresholds_file: Annotated[
        Path | None, typer.Option("--thresholds", help="regression.toml: default_max_drop and [max_drop] per metric")
    ] = None,
    pair: Annotated[
        list[str] | None, typer.Option("--pair", help="BASE_PLAYER=CANDIDATE_PLAYER where the players' names differ")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="compare runs whose judges or instances differ")] = False,
    resamples: Annotated[int, typer.Option(min=100, help="bootstrap resamples")] = 2000,
    seed: Annotated[int, typer.Option(help="bootstrap seed")] = 0,
    alpha: Annotated[
        float,
        typer.Option(help="family-wise false-alarm rate of the comparison (Holm across its metrics)"),
    ] = DEFAULT_ALPHA,
    markdown: Annotated[bool, typer.Option("--markdown", help="print a Markdown table (for a CI comment)")] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Pair two runs' episodes and test every family's headline metrics for a regression."""
    pairs: dict[str, str] = {}
    for item in split_values(pair):
        base_player, sep, candidate_player = item.partition("=")
        if not sep or not base_player or not candidate_player:
            raise ApplianceError(f"--pair: '{item}' is not BASE_PLAYER=CANDIDATE_PLAYER")
        pairs[base_player] = candidate_player
    thresholds = Thresholds.load(thresholds_file, list(max_drop or []))
    with Store.open(db, read_only=True) as store:
        for run_id in (base, candidate):
            if not store.has_run(run_id):
                raise ApplianceError(f"{store.path}: no run '{run_id}'")
        comparison = compare_runs(
            store,
            base,
            candidate,
            thresholds,
            pairs=pairs or None,
            force=force,
            resamples=resamples,
            seed=seed,
            alpha=alpha,
        )
    if as_json:
        print(json.dumps({**comparison.model_dump(), "regressions": len(comparison.regressions)}, default=str))
    elif markdown:
        print(comparison_markdown(comparison))
    else:
        print_comparison(console, comparison)
    if comparison.regressions:
        raise typer.Exit(REGRESSION_EXIT)
