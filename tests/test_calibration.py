"""Calibration end to end with scripted judges: the split, the fit, the held-out report, the stored map."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance.calibration.apply import apply_calibration
from appliance.calibration.heldout import NO_CEILING
from appliance.calibration.pipeline import CalibrationRequest, run_calibration
from appliance.calibration.tables import split_items
from appliance.catalog.models import Catalog, ModelSpec, load_catalog
from appliance.catalog.panels import Panel
from appliance.engine.backend import Backend
from appliance.engine.scripted import ScriptedBackend
from appliance.engine.types import GenerationRequest
from appliance.episodes.roles import BackendFactory
from appliance.labels import read_labels
from appliance.store import JudgmentRecord, ScoreRecord, Store
from appliance.store.labels import write_label_set
from tests.test_cli import cli

REPO = Path(__file__).resolve().parent.parent
PANEL = Panel(name="duo", judges=["smollm2-135m", "gemma3-270m"])


def prompt_text(request: GenerationRequest) -> str:
    return "\n".join(message.content for message in request.messages)


def scripted_judges(catalog: Catalog, spec: ModelSpec, *, parallel: int) -> Backend:
    """SmolLM2 reads the hidden quality off the response; Gemma always answers 10 (a useless judge)."""

    def respond(request: GenerationRequest) -> str:
        if spec.name == "gemma3-270m":
            return '{"score": 10}'
        quality = int(re.findall(r"quality (\d+)", prompt_text(request))[-1])
        return json.dumps({"score": min(10, quality + 1)})

    return ScriptedBackend(spec.name, respond)


def always_a(catalog: Catalog, spec: ModelSpec, *, parallel: int) -> Backend:
    return ScriptedBackend(spec.name, lambda request: '{"better": "A"}')


def rating_rows(
    heldout_override: dict[str, float] | None = None, shift_item: str | None = None
) -> list[dict[str, Any]]:
    rng = random.Random(5)
    rows: list[dict[str, Any]] = []
    for n in range(40):
        quality = rng.randint(0, 9)
        human = quality * 4 / 9
        item_id = f"item-{n:02d}"
        if heldout_override and item_id in heldout_override:
            human = heldout_override[item_id]
        if item_id == shift_item:
            human = 4.0 - human
        rows.append(
            {
                "item_id": item_id,
                "texts": {"context": "User: hello", "response": f"reply of quality {quality}" + "!" * n},
                "labels": [
                    {"annotator": "a", "criterion": "overall", "value": round(human, 2)},
                    {"annotator": "b", "criterion": "overall", "value": round(min(4.0, human + 0.4), 2)},
                    {"annotator": "c", "criterion": "overall", "value": "N/A"},
                ],
            }
        )
    return rows


def import_rows(store: Store, tmp_path: Path, rows: Sequence[object], kind: str = "turn") -> None:
    path = tmp_path / "labels.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows))
    (label_set,) = read_labels(path, "jsonl", name="synthetic", kind=kind)
    write_label_set(store, label_set, str(hash(path.read_text())))


def calibrate(store: Store, factory: BackendFactory = scripted_judges) -> dict[str, Any]:
    request = CalibrationRequest(PANEL, "synthetic", criterion="overall", seed=3, resamples=200)
    outcome = run_calibration(
        store,
        load_catalog(REPO / "models.toml"),
        request,
        REPO / "judges",
        backend_factory=factory,
    )
    return {"record": outcome.record, "report": outcome.report}


def test_split_is_seeded_disjoint_and_complete() -> None:
    ids = [f"i{n}" for n in range(11)]
    fit, held = split_items(ids, seed=4, heldout_fraction=0.5)
    assert not set(fit) & set(held) and sorted(fit + held) == sorted(ids)
    assert (fit, held) == split_items(list(reversed(ids)), seed=4, heldout_fraction=0.5)
    assert (fit, held) != split_items(ids, seed=5, heldout_fraction=0.5)


def test_held_out_labels_cannot_move_the_fitted_calibration(tmp_path: Path) -> None:
    with Store.open(tmp_path / "db.duckdb") as store:
        import_rows(store, tmp_path, rating_rows())
        first = calibrate(store)["record"]
        # Rewrite every held-out human label: the maps and weights must not move, the held-out report must.
        held = {item: 0.0 for item in first.heldout_items}
        import_rows(store, tmp_path, rating_rows(heldout_override=held))
        second = calibrate(store)["record"]
        assert (second.fit_items, second.heldout_items) == (first.fit_items, first.heldout_items)
        assert second.model == first.model
        assert second.metrics["panel_calibrated"] != first.metrics["panel_calibrated"]
        # Changing one fitting item's label does move the fit: the test above could have failed.
        import_rows(store, tmp_path, rating_rows(shift_item=first.fit_items[0]))
        third = calibrate(store)["record"]
        assert third.model != first.model


def test_report_shows_the_good_judge_the_useless_judge_and_the_baselines(tmp_path: Path) -> None:
    with Store.open(tmp_path / "db.duckdb") as store:
        import_rows(store, tmp_path, rating_rows())
        result = calibrate(store)
    report = result["report"]
    assert isinstance(report, dict)
    good, useless = report["judges"]["smollm2-135m"], report["judges"]["gemma3-270m"]
    assert good["spearman"]["value"] == pytest.approx(1.0)
    low, high = good["spearman"]["ci"]
    assert low <= 1.0 <= high + 1e-9
    assert useless["spearman"]["value"] is None  # a constant judge has no rank correlation, not 0
    weights = report["model"]["weights"]
    # Weights come from cross-fitted errors: the useless judge keeps a sliver, the good one nearly all.
    assert weights["smollm2-135m"] > 0.95 and weights["gemma3-270m"] < 0.05
    assert report["panel_calibrated"]["mae"]["value"] < report["panel_mean"]["mae"]["value"]
    for key in ("spearman", "kendall", "pearson", "krippendorff_alpha", "mae"):
        for row in ("panel_mean", "panel_calibrated", "human_ceiling", "length_baseline"):
            assert key in report[row], (row, key)
    assert report["human_ceiling"]["annotators"] == 3
    assert report["items"] == {"fit": 20, "heldout": 20}


def test_pairwise_calibration_reports_position_bias(tmp_path: Path) -> None:
    rows = [
        {
            "item_id": f"p{n}",
            "texts": {"instruction": "say hi", "response_a": "hi" * (n + 1), "response_b": "hello"},
            "labels": [{"annotator": a, "value": "A" if n % 2 else "B"} for a in ("x", "y", "z")],
        }
        for n in range(12)
    ]
    with Store.open(tmp_path / "db.duckdb") as store:
        import_rows(store, tmp_path, rows, kind="pairwise")
        request = CalibrationRequest(PANEL, "synthetic", seed=1, resamples=200)
        outcome = run_calibration(
            store, load_catalog(REPO / "models.toml"), request, REPO / "judges", backend_factory=always_a
        )
        swapped = store.query("SELECT count(*) FROM label_judgments WHERE order_swapped")[0][0]
    report = outcome.report
    assert swapped == 24  # every pair asked in both orders, by both judges
    judge = report["judges"]["smollm2-135m"]
    assert judge["position_bias"]["value"] == pytest.approx(1.0)
    assert judge["agreement"]["value"] == pytest.approx(0.0)  # "A" twice is never a win
    assert report["human_ceiling"]["agreement"]["value"] == pytest.approx(1.0)


def test_a_stored_rating_calibration_maps_episode_verdicts() -> None:
    from appliance.store.records import CalibrationRecord

    record = CalibrationRecord(
        calibration_id="cal-x",
        created_at=datetime(2026, 1, 1),
        panel="duo",
        judges=["j1", "j2"],
        label_set="s",
        criterion="overall",
        template="pingpong_likert",
        seed=0,
        fit_items=[],
        heldout_items=[],
        model={
            "kind": "rating",
            "maps": {"j1": {"xs": [1.0, 5.0], "ys": [0.0, 4.0]}, "j2": {"xs": [1.0, 5.0], "ys": [2.0, 2.0]}},
            "weights": {"j1": 0.75, "j2": 0.25},
        },
        metrics={},
    )

    def verdict(judge: str, target: int, criterion: str, score: float) -> JudgmentRecord:
        return JudgmentRecord(
            panel="duo",
            judge=judge,
            mode="likert",
            template="pingpong_likert",
            target_idx=target,
            criterion=criterion,
            score=score,
            raw_text="{}",
            parsed=True,
        )

    judgments = [
        verdict("j1", 1, "in_character", 5.0),
        verdict("j1", 1, "fluent", 3.0),  # j1's turn-1 summary: 4 -> mapped 3.0
        verdict("j1", 1, "refusal", 1.0),  # the refusal flag is not part of the summary
        verdict("j2", 1, "in_character", 1.0),  # j2 maps everything to 2.0
        verdict("j1", 3, "in_character", 1.0),  # turn 3: only j1, mapped 0.0
    ]
    scores = [ScoreRecord(panel="duo", player="p", metric="final", value=3.0)]
    (calibrated,) = apply_calibration(scores, judgments, record, "final")
    turn_1 = 0.75 * 3.0 + 0.25 * 2.0
    assert calibrated.calibrated_value == pytest.approx(np.mean([turn_1, 0.0]))
    assert calibrated.calibration_id == "cal-x" and calibrated.value == 3.0


def test_a_single_rater_set_fits_and_reports_its_ceiling_as_not_measurable(tmp_path: Path) -> None:
    """One label per item (a lab's single rater, or a consensus label): every item fits, the good judge is
    found held out, and the ceiling says why it cannot be measured, where once the set had 0 usable items."""
    rows = [row | {"labels": row["labels"][:1]} for row in rating_rows()]
    with Store.open(tmp_path / "db.duckdb") as store:
        import_rows(store, tmp_path, rows)
        report = calibrate(store)["report"]
    assert report["items"] == {"fit": 20, "heldout": 20}
    assert report["judges"]["smollm2-135m"]["spearman"]["value"] == pytest.approx(1.0)
    assert report["panel_calibrated"]["spearman"]["value"] > 0.9
    assert report["human_ceiling"] == {"annotators": 1, "not_measurable": NO_CEILING}


def test_a_mostly_double_rated_set_keeps_its_consensus_items_only(tmp_path: Path) -> None:
    """Where most items carry two values, an item with one is left out, as before (the target is a consensus)."""
    rows = rating_rows()
    rows[0] = rows[0] | {"labels": rows[0]["labels"][:1]}
    with Store.open(tmp_path / "db.duckdb") as store:
        import_rows(store, tmp_path, rows)
        record = calibrate(store)["record"]
    assert "item-00" not in record.fit_items + record.heldout_items
    assert len(record.fit_items + record.heldout_items) == 39


@pytest.mark.real_model
def test_the_cli_calibrates_a_single_rater_set_on_the_real_model(tmp_path: Path) -> None:
    rows = [
        {
            "item_id": f"i{n}",
            "texts": {"context": f"User: question {n}?", "response": "A clear, kind answer." if n % 2 else "no."},
            "labels": [{"annotator": "lab", "criterion": "Overall", "value": 1 + (n * 3) % 5}],
        }
        for n in range(8)
    ]
    labels = tmp_path / "single.jsonl"
    labels.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    db = str(tmp_path / "single.duckdb")
    assert cli("labels", "import", str(labels), "--format", "jsonl", "--db", db).returncode == 0
    calibrated = cli(
        *("calibrate", "--panel", "smollm2", "--labels", "single", "--criterion", "Overall", "--resamples", "100"),
        *("--plot", str(tmp_path / "plot.png"), "--json", "--db", db),
    )
    assert calibrated.returncode == 0, calibrated.stderr[-2000:]
    report = json.loads(calibrated.stdout)
    assert report["items"] == {"fit": 4, "heldout": 4}
    assert report["panel_calibrated"]["n"] == 4 and "spearman" in report["panel_calibrated"]
    assert report["human_ceiling"]["not_measurable"] == NO_CEILING
