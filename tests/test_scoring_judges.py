"""Scoring requests in the engine, likelihood judges, and the calibration that combines their features."""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import shutil
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import llama_cpp as C
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from appliance.bench.scoring import scoring_bench
from appliance.calibration.apply import pick_calibrations, stale_calibrations
from appliance.calibration.combiner import FeatureAverage
from appliance.calibration.features import FeatureCalibration, RidgeModel, fit_ridge, simplex_weights
from appliance.calibration.pipeline import (
    CalibrationRequest,
    choose_criterion,
    default_template,
    run_calibration,
    run_transfer,
)
from appliance.calibration.shipped import write_shipped
from appliance.catalog.models import Catalog, ModelSpec, load_catalog
from appliance.catalog.panels import Panel, load_panels
from appliance.engine.backend import Backend
from appliance.engine.chunk_plan import ALIGNED_CHUNK
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.scoring import log_softmax, log_softmax_at
from appliance.engine.scripted import ScriptedBackend
from appliance.engine.types import (
    Completion,
    GenerationRequest,
    ResolvedSampling,
    ScoredText,
    ScoringRequest,
    TokenScores,
)
from appliance.episodes.client import ModelClient, RoleBinding
from appliance.episodes.context import EpisodeContext
from appliance.episodes.scheduler import Scheduler
from appliance.errors import ApplianceError
from appliance.judging.scoring import comparison_features, pair_reading
from appliance.judging.scoring_templates import LikelihoodTemplate, expected_score, tail_lines
from appliance.judging.templates import (
    PairwiseTemplate,
    RatingTemplate,
    YesNoTemplate,
    judge_messages,
    load_judge_template,
)
from appliance.judging.verdicts import PairVerdict, ask_judge, judge_pair
from appliance.labels import read_labels
from appliance.labels.model import HumanLabel, LabelKind, LabelSet
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios.pingpong.family import PingPongFamily
from appliance.scenarios.pingpong.report import build_leaderboard
from appliance.store import Store
from appliance.store.labels import write_calibration, write_label_set
from appliance.store.records import CalibrationRecord, JudgmentRecord
from appliance.store.run_view import RunView
from appliance.util.agreement import bootstrap_metrics
from tests.fakes import scripted_factory
from tests.test_calibration import import_rows

REPO = Path(__file__).resolve().parent.parent
CONTEXT = (
    "User: Hi! How was your weekend?\nSystem: It was great, I went hiking in the mountains with my brother "
    "and we saw a bear from far away.\nUser: Wow, that sounds scary. Were you afraid of it?\n"
) * 2 + "System:"
CONTINUATIONS = (" Not really, it was far away.", " I like pizza a lot", " Yes")


@pytest.fixture(scope="module")
def smollm2() -> Iterator[LlamaCppBackend]:
    catalog = load_catalog(REPO / "models.toml")
    backend = LlamaCppBackend(catalog.resolve_path(catalog.get("smollm2-135m")), name="smollm2-135m", slots=8)
    yield backend
    backend.close()


def run_all(backend: LlamaCppBackend, requests: list[GenerationRequest]) -> list[Completion]:
    tickets = {backend.submit(request): index for index, request in enumerate(requests)}
    done: dict[int, Completion] = {}
    while backend.busy:
        for ticket, completion in backend.step():
            done[tickets[ticket]] = completion
    return [done[index] for index in range(len(requests))]


def raw_llama_scores(backend: LlamaCppBackend, prompt: str, continuation: str, choices: tuple[str, ...]) -> TokenScores:
    """The same numbers read straight from llama.cpp: one context, one decode of everything, all logits."""
    model = backend.model
    head = model.tokenize(prompt, parse_special=True)
    tokens = head + model.tokenize(continuation, parse_special=False, add_bos=False)
    choice_ids = [model.tokenize(choice, parse_special=False, add_bos=False)[0] for choice in choices]
    params = C.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = 1024
    params.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_DISABLED
    params.n_threads = params.n_threads_batch = 2
    context = C.llama_init_from_model(model.handle, params)
    batch = C.llama_batch_init(len(tokens), 0, 1)
    try:
        for index, token in enumerate(tokens):
            batch.token[index], batch.pos[index], batch.n_seq_id[index] = token, index, 1
            batch.seq_id[index][0], batch.logits[index] = 0, 1
        batch.n_tokens = len(tokens)
        assert C.llama_decode(context, batch) == 0
        rows = [log_softmax(model.logits_row(context, i)) for i in range(len(tokens))]
    finally:
        C.llama_batch_free(batch)
        C.llama_free(context)
    return TokenScores(
        token_logprobs=tuple(float(rows[i][tokens[i + 1]]) for i in range(len(head) - 1, len(tokens) - 1)),
        choice_logprobs=tuple(float(rows[-1][choice]) for choice in choice_ids),
    )


def test_scoring_logprobs_equal_the_raw_llama_cpp_api_batched_reused_and_alone(smollm2: LlamaCppBackend) -> None:
    requests = [
        GenerationRequest(prompt=prompt, scoring=ScoringRequest(continuation=text, choices=(" yes", " no")))
        for prompt in (CONTEXT, "User: What is your favourite food?\nSystem:")
        for text in CONTINUATIONS
    ]
    batched = run_all(smollm2, requests)
    for request, completion in zip(requests, batched, strict=True):
        assert request.scoring is not None
        expected = raw_llama_scores(smollm2, request.prompt or "", request.scoring.continuation, (" yes", " no"))
        assert completion.scores == expected  # bit for bit, not approximately
        assert len(expected.token_logprobs) == smollm2.count_tokens(request.scoring.continuation) - (
            1 if smollm2.model.add_bos else 0
        )
    # The long context was prefilled once: its later continuations started from the shared prefix.
    assert batched[1].cached_prompt_tokens > 60 and batched[2].cached_prompt_tokens > 60
    assert_batch_invariant(smollm2, requests, batched)


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.float32, st.integers(2, 4000), elements=st.floats(-60, 60, width=32)),
    st.lists(st.integers(0, 10**6), min_size=1, max_size=4),
)
def test_reading_a_few_entries_of_a_row_gives_the_whole_rows_numbers(row: np.ndarray, picks: list[int]) -> None:
    """A scoring request reads one or a few entries of a vocabulary-wide row: the shortcut must give the very
    float64 numbers of the whole normalised row (stored features and golden runs depend on the last bit)."""
    indices = [pick % len(row) for pick in picks]
    whole = log_softmax(row.copy())
    assert log_softmax_at(row, indices) == [float(whole[index]) for index in indices]


def test_the_rows_a_request_reads_are_the_log_probabilities_it_returns(smollm2: LlamaCppBackend) -> None:
    """The bench counts each request's read rows (`request_reads`) for its ideal time: one per continuation token,
    one more for choices, and a generation's last position."""
    requests = [
        GenerationRequest(prompt=CONTEXT, scoring=ScoringRequest(continuation=CONTINUATIONS[0])),
        GenerationRequest(prompt=CONTEXT, scoring=ScoringRequest(continuation=CONTINUATIONS[1], choices=(" yes",))),
    ]
    for request, completion in zip(requests, run_all(smollm2, requests), strict=True):
        tokens, reads = smollm2.request_reads(request)
        assert completion.scores is not None and completion.prompt_tokens == len(tokens)
        returned = len(completion.scores.token_logprobs) + (1 if completion.scores.choice_logprobs else 0)
        assert len(reads) == returned and reads.start == len(smollm2.request_reads(request.model_copy(
            update={"scoring": None}))[0]) - 1  # fmt: skip
    generation = GenerationRequest(prompt=CONTEXT)
    tokens, reads = smollm2.request_reads(generation)
    assert list(reads) == [len(tokens) - 1]


def assert_batch_invariant(
    backend: LlamaCppBackend, requests: list[GenerationRequest], batched: list[Completion]
) -> None:
    """Scored again from cached prefixes (whole aligned chunks), then each alone from cold: the same bits."""
    again = run_all(backend, requests)  # every prefix longer than an aligned chunk is now cached
    long_prompts = [c for c in again if c.prompt_tokens > ALIGNED_CHUNK + 1]
    assert len(long_prompts) >= 3 and all(c.cached_prompt_tokens >= ALIGNED_CHUNK for c in long_prompts)
    assert [c.scores for c in again] == [c.scores for c in batched]
    backend.forget_caches()
    alone = [run_all(backend, [request])[0] for request in reversed(requests)]
    assert [c.scores for c in reversed(alone)] == [c.scores for c in batched]


def test_flash_attention_in_exact_mode_is_batch_invariant(smollm2: LlamaCppBackend) -> None:
    """Flash attention's results change with chunk boundaries; exact mode's aligned chunks make them
    a function of the prompt alone, so batched, reused and lone runs agree bit for bit."""
    fast_kernel = LlamaCppBackend(smollm2.model.path, name="smollm2-135m", slots=8, flash_attention=True)
    try:
        requests = [
            GenerationRequest(prompt=prompt, scoring=ScoringRequest(continuation=text, choices=(" yes", " no")))
            for prompt in (CONTEXT, CONTEXT.replace("bear", "wolf") * 2)
            for text in CONTINUATIONS
        ]
        batched = run_all(fast_kernel, requests)
        assert all(c.scores is not None for c in batched)
        assert_batch_invariant(fast_kernel, requests, batched)
        # The kernel is really another one: the numbers are not those of the default context.
        assert batched[0].scores != run_all(smollm2, requests[:1])[0].scores
        # Greedy replies too: decoded together or each alone, the same tokens.
        sampling = ResolvedSampling(temperature=0.0, max_tokens=12)
        asks = [GenerationRequest(prompt=prompt + " Well,", sampling=sampling) for prompt in (CONTEXT, CONTEXT[40:])]
        together = run_all(fast_kernel, asks)
        fast_kernel.forget_caches()
        assert [c.text for c in together] == [run_all(fast_kernel, [ask])[0].text for ask in asks]
    finally:
        fast_kernel.close()


def test_a_choice_of_several_tokens_is_refused_with_the_model_named(smollm2: LlamaCppBackend) -> None:
    (completion,) = run_all(
        smollm2, [GenerationRequest(prompt="Score:", scoring=ScoringRequest(choices=("1", " incomprehensibly")))]
    )
    assert completion.finish_reason == "error" and completion.scores is None
    assert "smollm2-135m" in (completion.error or "") and "incomprehensibly" in (completion.error or "")


def test_follow_ups_that_extend_a_scored_reply_reuse_its_whole_cache_and_score_as_alone(
    smollm2: LlamaCppBackend,
) -> None:
    """A likelihood judge scores a reply, then follow-ups after it: declaring that they extend the reply's
    request makes their chunks end where its chunks end, so the reply is computed once."""
    reply = CONTINUATIONS[0]
    conditional = GenerationRequest(prompt=CONTEXT, scoring=ScoringRequest(continuation=reply))

    def followups(declared: bool) -> list[GenerationRequest]:
        extends = ScoredText(prompt=CONTEXT, continuation=reply) if declared else None
        return [
            GenerationRequest(
                prompt=CONTEXT + reply + "\nUser:", scoring=ScoringRequest(continuation=text, extends=extends)
            )
            for text in (" Thanks, that helps!", " You ignored my question.")
        ]

    smollm2.forget_caches()
    scored, *after = run_all(smollm2, [conditional, *followups(True)])
    assert after[0].cached_prompt_tokens == scored.prompt_tokens  # the reply is not computed again
    smollm2.forget_caches()
    _, *undeclared = run_all(smollm2, [conditional, *followups(False)])
    # Undeclared, the follow-up's own plan cuts elsewhere after the last aligned chunk of the context.
    first_read = len(smollm2.model.tokenize(CONTEXT, parse_special=True)) - 1
    assert undeclared[0].cached_prompt_tokens == first_read // ALIGNED_CHUNK * ALIGNED_CHUNK < scored.prompt_tokens
    # Either way every follow-up's numbers are those it gets alone, from a cold cache.
    for request, completion in zip(followups(True), after, strict=True):
        smollm2.forget_caches()
        assert run_all(smollm2, [request])[0].scores == completion.scores


def test_expected_score_weights_the_digits_and_reports_their_entropy() -> None:
    certain = expected_score([0.0, -50.0, -50.0], scale_min=1)
    assert certain["expected"] == pytest.approx(1.0) and certain["entropy"] == pytest.approx(0.0, abs=1e-9)
    even = expected_score([-1.0, -1.0, -1.0], scale_min=1)
    assert even["expected"] == pytest.approx(2.0) and even["entropy"] == pytest.approx(np.log(3))


def test_a_long_context_keeps_its_last_whole_lines() -> None:
    text = "\n".join(f"line {n} " + "x" * 40 for n in range(100))
    kept = tail_lines(text, 200)
    assert len(kept) <= 200 and kept.endswith("line 99 " + "x" * 40) and kept.startswith("line ")


def test_ridge_chooses_its_penalty_inside_the_fit_and_finds_the_informative_feature() -> None:
    rng = np.random.default_rng(0)
    signal, noise = rng.normal(size=200), rng.normal(size=200)
    target = 2.0 + 0.8 * signal + rng.normal(scale=0.3, size=200)
    model = fit_ridge({"signal": signal, "noise": noise}, target, seed=1)
    assert model is not None
    coefs = dict(zip(model.features, model.coefs, strict=True))
    assert coefs["signal"] > 0.6 and abs(coefs["noise"]) < 0.1
    # Without noise the least cross-validated error is at the smallest penalty, and the fit is the
    # closed form: a standardised feature z has z.z = n, so its weight is 0.8 sd(x) n / (n + 0.01).
    exact = fit_ridge({"signal": signal}, 2.0 + 0.8 * signal, seed=1)
    assert exact is not None and exact.alpha == 0.01
    assert exact.coefs[0] == pytest.approx(0.8 * signal.std() * 200 / 200.01, rel=1e-9)
    assert exact.intercept == pytest.approx(2.0 + 0.8 * signal.mean(), rel=1e-12)
    weights = simplex_weights(np.column_stack([target + rng.normal(scale=0.1, size=200), np.full(200, 2.0)]), target)
    assert weights[0] > 0.9 and weights.sum() == pytest.approx(1.0)


def test_items_sharing_a_context_are_resampled_together() -> None:
    clusters = np.asarray(["a", "a", "a", "b", "c", "c"])
    seen: list[np.ndarray] = []

    def compute(rows: np.ndarray) -> dict[str, float | None]:
        seen.append(rows)
        return {"n": float(len(rows))}

    bootstrap_metrics(compute, 6, seed=0, resamples=50, clusters=clusters)
    for rows in seen:
        labels = clusters[rows]
        for label, size in (("a", 3), ("c", 2)):
            assert np.count_nonzero(labels == label) % size == 0  # whole clusters only


# -- calibration of likelihood judges on labelled items (scripted judges that read the hidden quality) --


def quality_scorer(request: GenerationRequest) -> TokenScores:
    """Log-probabilities that rise with the quality written in the response, plus noise from the text."""
    assert request.scoring is not None
    text = f"{request.prompt}{request.scoring.continuation}"
    qualities = re.findall(r"quality (\d+)", text)
    level = int(qualities[-1]) if qualities else 5
    noise = random.Random(text).uniform(-0.3, 0.3)
    words = max(1, len(request.scoring.continuation.split()))
    # a comparison read: the choices (A, B) as likely as the qualities shown as A and as B
    shown = [int(q) for q in qualities[-len(request.scoring.choices) :]] if request.scoring.choices else []
    choices = tuple(-(10 - q) / 3 + noise for q in shown)
    return TokenScores(token_logprobs=tuple([-(10 - level) / 3 + noise] * words), choice_logprobs=choices)


def feature_judges(catalog: Catalog, spec: ModelSpec, *, parallel: int) -> Backend:
    return ScriptedBackend(spec.name, lambda request: "", scorer=quality_scorer)


def feature_rows(heldout: dict[str, float] | None = None, shift: str | None = None) -> list[dict[str, Any]]:
    rng = random.Random(5)
    rows = []
    for n in range(48):
        quality = rng.randint(0, 9)
        human = (heldout or {}).get(f"item-{n:02d}", quality * 4 / 9)
        if f"item-{n:02d}" == shift:
            human = 4.0 - human
        rows.append(
            {
                "item_id": f"item-{n:02d}",
                "texts": {"context": f"User: topic {n % 12}", "response": f"reply of quality {quality}"},
                "labels": [
                    {"annotator": "a", "criterion": "overall", "value": round(human, 2)},
                    {"annotator": "b", "criterion": "overall", "value": round(min(4.0, human + 0.4), 2)},
                ],
            }
        )
    return rows


def calibrate_features(store: Store) -> Any:
    request = CalibrationRequest(
        Panel(name="duo", judges=["smollm2-135m", "gemma3-270m"]),
        "synthetic",
        criterion="overall",
        template="turn_likelihood",
        seed=3,
        resamples=200,
    )
    return run_calibration(
        store, load_catalog(REPO / "models.toml"), request, REPO / "judges", backend_factory=feature_judges
    )


def test_features_are_stored_with_the_verdicts_and_held_out_items_never_reach_the_fit(tmp_path: Path) -> None:
    template = load_judge_template(REPO / "judges" / "turn_likelihood.toml")
    with Store.open(tmp_path / "db.duckdb") as store:
        import_rows(store, tmp_path, feature_rows())
        first = calibrate_features(store)
        stored = store.query("SELECT features, score FROM label_judgments")
        assert len(stored) == 96  # 48 items x 2 judges
        for features, score in stored:
            values = json.loads(features)
            assert set(values) == set(template.outputs())
            assert score == values["followup"]  # the template's summary feature is the verdict's score
        report = first.report
        chosen = report["combiner"]["chosen"]
        assert report["kind"] == "turn" and report["model"]["kind"] == (
            "features" if chosen == "ridge" else "feature_average"
        )
        assert chosen in report["combiner"]["cross_validated_spearman"]
        assert report["panel_calibrated"]["spearman"]["value"] > 0.9
        assert set(report["features"]["smollm2-135m"]) == set(template.outputs())
        assert "spearman_like_for_like" in report["panel_calibrated"]
        low, high = report["human_scale"]
        assert 0.0 <= low < high <= 4.0  # from the fitting part's annotator values
        # Every held-out label rewritten: the fitted models and weights stay; the held-out report moves.
        import_rows(store, tmp_path, feature_rows(heldout={i: 0.0 for i in first.record.heldout_items}))
        second = calibrate_features(store)
        assert second.record.model == first.record.model
        assert second.record.metrics["panel_calibrated"] != first.record.metrics["panel_calibrated"]
        import_rows(store, tmp_path, feature_rows(shift=first.record.fit_items[0]))
        assert calibrate_features(store).record.model != first.record.model  # the check above could fail


# -- a likelihood panel in a run: features per reply, the calibration that applies, and the one that does not --


def likelihood_calibration(
    panel: Panel,
    fingerprint: str,
    calibration_id: str,
    criterion: str = "Overall",
    top: float = 4.0,
    *,
    averaged: bool = False,
) -> CalibrationRecord:
    """A calibration of the judges' `followup` feature: a ridge panel, or (`averaged`) a feature average."""
    model: FeatureCalibration | FeatureAverage = FeatureCalibration(
        {judge: RidgeModel(("followup",), (0.0,), (1.0,), (1.0,), top / 2, top / 4) for judge in panel.judges},
        dict.fromkeys(panel.judges, 1.0 / len(panel.judges)),
        (0.0, top),
    )
    if averaged:
        terms = tuple((judge, "followup") for judge in panel.judges)
        ones = (1.0,) * len(terms)
        model = FeatureAverage(terms, (0.0,) * len(terms), ones, ones, top / 4, top / 2, (0.0, top), "panel mean")
    return CalibrationRecord(
        calibration_id=calibration_id,
        created_at=datetime(2026, 1, 1),
        panel=panel.name,
        judges=list(panel.judges),
        label_set="fed-turn",
        criterion=criterion,
        template="turn_likelihood",
        seed=0,
        fit_items=[],
        heldout_items=[],
        model=model.to_json() | {"human_scale": [0.0, top], "template_fingerprint": fingerprint},
        metrics={"panel_calibrated": {"spearman": {"value": 0.25, "ci": [0.1, 0.4]}}},
    )


def test_a_likelihood_panel_scores_replies_by_features_and_its_calibration_names_the_label_set(
    tmp_path: Path,
) -> None:
    catalog = load_catalog(REPO / "models.toml")
    panel = Panel(name="lik", judges=["smollm2-135m", "gemma3-270m"], judging="likelihood")
    template = load_judge_template(REPO / "judges" / "turn_likelihood.toml")
    family = PingPongFamily.load(REPO / "scenarios" / "pingpong", REPO / "judges")
    config = RunConfig(
        scenarios=["pingpong"],
        players=["smollm2-135m", "gemma3-270m"],
        interrogator="smollm2-135m",
        panel=panel,
        seed=5,
        limit=3,
        turns=2,
        models_file=str(catalog.source),
    )
    with Store.open(tmp_path / "db.duckdb") as store:
        write_calibration(store, likelihood_calibration(panel, "an older template", "cal-stale"))
        write_calibration(store, likelihood_calibration(panel, template.fingerprint(), "cal-current"))
        # PingPong's fluent score is calibrated to FED Fluent; no calibration fits Engaging, and one fitted
        # on another criterion (Relevant) maps no PingPong score
        # (a feature average, the other kind a calibration of features can be)
        fluent = likelihood_calibration(
            panel, template.fingerprint(), "cal-fluent", criterion="Fluent", top=2.0, averaged=True
        )
        write_calibration(store, fluent)
        write_calibration(store, likelihood_calibration(panel, template.fingerprint(), "cal-rel", "Relevant"))
        factory = scripted_factory(lambda model, request: f"A reply from {model}.")
        summary = Runner(catalog, store, backend_factory=factory).execute(config, [family])
        assert summary.episodes_finished == 6
        scoring = [r for b in factory.opened.values() for r in b.requests if r.scoring is not None]
        assert scoring and all(r.grammar is None for r in scoring)  # nothing sampled for the verdicts
        features = store.query(
            "SELECT DISTINCT criterion FROM judgments WHERE mode = 'likelihood' AND template = 'turn_likelihood'"
        )
        assert {row[0] for row in features} == set(template.outputs())
        board = build_leaderboard(RunView(store, summary.run_id, "pingpong"))
        stored_config = store.run(summary.run_id).config
        assert stale_calibrations(store, panel, "turn_likelihood", REPO / "judges") == ["cal-stale"]
    assert board.calibration is not None and board.calibration["calibration_id"] == "cal-current"
    assert (board.calibration["label_set"], board.calibration["criterion"]) == ("fed-turn", "Overall")
    assert board.calibration["heldout_spearman"] == 0.25
    calibrated = [row.calibrated_final for row in board.rows]
    assert all(value is not None and 0.0 <= value <= 4.0 for value in calibrated)
    assert len(set(calibrated)) == len(calibrated)  # the scripted features differ, so do the scores
    assert set(board.criterion_calibrations) == {"fluent"}
    assert board.criterion_calibrations["fluent"]["criterion"] == "Fluent"
    fluent_scores = [row.calibrated_fluent for row in board.rows]
    assert all(value is not None and 0.0 <= value <= 2.0 for value in fluent_scores)
    assert fluent_scores != calibrated and all(row.calibrated_entertaining is None for row in board.rows)
    assert RunConfig(**stored_config).calibrations == {"pingpong": "cal-current", "pingpong:fluent": "cal-fluent"}


def test_a_shipped_calibration_applies_only_to_its_template_version(tmp_path: Path) -> None:
    panel = Panel(name="lik", judges=["smollm2-135m"], judging="likelihood")
    judges = tmp_path / "judges"
    shutil.copytree(REPO / "judges", judges, ignore=shutil.ignore_patterns("calibrations"))
    fingerprint = load_judge_template(judges / "turn_likelihood.toml").fingerprint()
    record = likelihood_calibration(panel, fingerprint, "cal-shipped")
    write_shipped(
        judges,
        record,
        {"judges": {}, **{k: {} for k in ("panel_mean", "panel_calibrated", "human_ceiling", "length_baseline")}},
    )
    family = PingPongFamily.load(REPO / "scenarios" / "pingpong", judges)
    with Store.open(tmp_path / "db.duckdb") as store:
        picked = pick_calibrations(store, panel, [family], judges)
        assert picked["pingpong"].calibration_id == "cal-shipped"
        assert store.query("SELECT count(*) FROM calibrations")[0][0] == 1  # copied in, so a run can name it
        template = judges / "turn_likelihood.toml"
        template.write_text(template.read_text().replace("That makes a lot of sense.", "Fair enough."))
        assert pick_calibrations(store, panel, [family], judges) == {}
        assert stale_calibrations(store, panel, "turn_likelihood", judges) == ["cal-shipped"]


def test_pairs_are_judged_by_the_difference_of_their_features(tmp_path: Path) -> None:
    rng = random.Random(2)
    rows = []
    for n in range(40):
        a, b = rng.sample(range(10), 2)
        rows.append(
            {
                "item_id": f"p{n:02d}",
                "texts": {"instruction": f"task {n}", "response_a": f"quality {a}", "response_b": f"quality {b}"},
                "labels": [{"annotator": x, "value": "A" if a > b else "B"} for x in ("x", "y", "z")],
            }
        )
    with Store.open(tmp_path / "db.duckdb") as store:
        import_rows(store, tmp_path, rows, kind="pairwise")
        request = CalibrationRequest(
            Panel(name="duo", judges=["smollm2-135m"]),
            "synthetic",
            template="instruction_likelihood",
            seed=1,
            resamples=200,
        )
        outcome = run_calibration(
            store, load_catalog(REPO / "models.toml"), request, REPO / "judges", backend_factory=feature_judges
        )
        swapped = store.query("SELECT count(*) FROM label_judgments WHERE order_swapped")[0][0]
    assert swapped == 0  # feature differences cannot depend on the order
    report = outcome.report
    assert report["model"]["kind"] == "pair_features"
    assert report["panel_calibrated"]["agreement"]["value"] >= 0.85  # chance is about 0.5
    assert report["features"]["smollm2-135m"]["logprob"]["agreement"]["value"] >= 0.85
    # the direct comparison, read in both orders, tells as much; its slot lean is noise only
    assert report["features"]["smollm2-135m"]["preference"]["agreement"]["value"] >= 0.85


def test_the_scoring_bench_shares_prefixes_and_times_the_raw_prefill_of_the_same_requests(
    smollm2: LlamaCppBackend,
) -> None:
    template = load_judge_template(REPO / "judges" / "turn_likelihood.toml")
    assert isinstance(template, LikelihoodTemplate)
    smollm2.forget_caches()
    result = scoring_bench(smollm2, template, items=2, seed=0)
    # follow-ups after the reply and after the conversation alone, then the conditional and prior scores
    per_item = 2 * (len(template.positive) + len(template.negative)) + 2
    assert result.requests == 2 * per_item
    assert result.computed_tokens < result.request_tokens / 2  # each context was prefilled once, not ten times
    # the raw loop computed exactly the tokens the engine was asked for, no more, no fewer
    assert round(result.raw_tokens_per_s * result.raw_s) == result.request_tokens


def test_a_label_set_with_one_criterion_needs_no_criterion_and_two_need_one() -> None:
    def labels(*criteria: str) -> LabelSet:
        rows = [HumanLabel("i1", "a", criterion, 1.0, "1") for criterion in criteria]
        return LabelSet("coherence-set", "turn", "jsonl", "x.jsonl", [], rows)

    assert choose_criterion(labels("coherence"), None) == "coherence"
    with pytest.raises(ApplianceError, match="--criterion: label set 'coherence-set' needs one of: coherence, fluency"):
        choose_criterion(labels("coherence", "fluency"), None)


def followup_scorer(request: GenerationRequest) -> TokenScores:
    """Only the follow-up 'Fair enough.' reads the response's quality; every other request is loud noise."""
    assert request.scoring is not None
    text = f"{request.prompt}{request.scoring.continuation}"
    qualities = re.findall(r"quality (\d+)", text)
    level = int(qualities[-1]) if qualities else 5
    rng = random.Random(text)
    tells = request.scoring.continuation == " Fair enough."
    value = level / 3 + rng.uniform(-0.1, 0.1) if tells else rng.uniform(-4, 4)
    return TokenScores(token_logprobs=(value,) * max(1, len(request.scoring.continuation.split())))


def test_each_follow_up_is_a_feature_and_the_calibration_finds_the_one_that_tells(tmp_path: Path) -> None:
    judges = tmp_path / "judges"
    shutil.copytree(REPO / "judges", judges, ignore=shutil.ignore_patterns("calibrations"))
    shipped = load_judge_template(judges / "turn_likelihood.toml")
    assert shipped.model_copy(update={"each_followup": False}).fingerprint() == shipped.fingerprint()
    assert shipped.model_copy(update={"each_followup": True}).fingerprint() != shipped.fingerprint()
    source = (judges / "turn_likelihood.toml").read_text()
    lists = source[source.index("positive = [") :]
    each = source.replace(lists, 'positive = ["Nice.", "Fair enough."]\nnegative = ["Huh?", "What?"]\n')
    each = each.replace('mode = "likelihood"', 'mode = "likelihood"\neach_followup = true')
    (judges / "turn_each.toml").write_text(each)
    template = load_judge_template(judges / "turn_each.toml")
    assert {"positive_1", "positive_2", "negative_1", "negative_2"} <= set(template.outputs())

    def judges_reading_one_follow_up(catalog: Catalog, spec: ModelSpec, *, parallel: int) -> Backend:
        return ScriptedBackend(spec.name, lambda request: "", scorer=followup_scorer)

    with Store.open(tmp_path / "db.duckdb") as store:
        import_rows(store, tmp_path, feature_rows())
        request = CalibrationRequest(
            Panel(name="duo", judges=["smollm2-135m"]), "synthetic", criterion="overall", template="turn_each", seed=3
        )
        report = run_calibration(
            store, load_catalog(REPO / "models.toml"), request, judges, backend_factory=judges_reading_one_follow_up
        ).report
        stored = [json.loads(row[0]) for row in store.query("SELECT features FROM label_judgments")]
    assert len(stored) == 48 and all(set(values) == set(template.outputs()) for values in stored)
    for values in stored:
        assert values["followup_positive"] == pytest.approx((values["positive_1"] + values["positive_2"]) / 2)
    alone = {name: row["spearman"]["value"] for name, row in report["features"]["smollm2-135m"].items()}
    assert alone["positive_2"] > 0.9 and alone["followup"] < 0.7  # the mean drowns the one that tells in noise
    assert report["panel_calibrated"]["spearman"]["value"] > alone["followup"] + 0.2


#: a SimulBench script's fields, with an earlier turn that a shorter prompt leaves out
_RATED = {"task": "A Linux terminal.", "history": "User: a long history\nSystem: of earlier turns", "request": "pwd"}


def _read_ratings(
    backend: Backend, template: RatingTemplate, replies: list[str], *, panel_reads_probabilities: bool = True
) -> list[JudgmentRecord]:
    """Ask one judge (the backend's model) to rate each reply through `ask_judge`, under a likelihood
    panel (or a sampled one); every reply's requests go out together."""
    scheduler = Scheduler({backend.name: backend})
    ctx = EpisodeContext(
        "e",
        0,
        scheduler,
        {f"judge:{backend.name}": RoleBinding(backend.name)},
        likelihood_template="turn_followups" if panel_reads_probabilities else None,
    )
    variables = dict(_RATED)

    async def run() -> list[list[JudgmentRecord]]:
        asks = [
            ask_judge(
                ctx,
                template,
                variables | {"response": reply},
                judge_model=backend.name,
                panel="p",
                target_idx=index,
                shorter=[variables | {"response": reply, "history": ""}],
            )
            for index, reply in enumerate(replies)
        ]
        work = asyncio.ensure_future(asyncio.gather(*asks))
        await scheduler.drive(work)
        return await work

    return [records[0] for records in asyncio.run(run())]


def test_a_likelihood_panel_reads_a_rating_judge_instead_of_sampling_it() -> None:
    template = load_judge_template(REPO / "judges" / "simulbench_rating.toml")
    assert isinstance(template, RatingTemplate)

    def favours_the_right_answer(request: GenerationRequest) -> TokenScores:
        """The judge puts its mass near 9 for the right output and near 2 for anything else."""
        assert request.scoring is not None and request.messages
        value = int(re.findall(r"\d+", request.scoring.continuation)[0])
        target = 9 if "/home/user" in request.messages[-1].content else 2
        return TokenScores(token_logprobs=(-0.5, -abs(value - target) * 1.5), choice_logprobs=())

    backend = ScriptedBackend("j", lambda request: '{"reasoning": "x", "score": 5}', scorer=favours_the_right_answer)
    good, bad = _read_ratings(backend, template, ["/home/user", "ls: command not found"])
    assert all(request.scoring is not None for request in backend.requests)  # nothing sampled
    assert len(backend.requests) == 2 * 10  # one scored verdict per value of the 1-10 scale, per reply
    assert {r.scoring.continuation for r in backend.requests if r.scoring} == {
        f'{{"score": {v}}}' for v in range(1, 11)
    }
    assert [r.mode for r in (good, bad)] == ["expected", "expected"] and good.parsed and bad.parsed
    assert good.score is not None and bad.score is not None
    # the first token's -0.5 is common to every value: the shares are exp(-1.5 |v - target|), normalised
    for read, target in ((good, 9), (bad, 2)):
        weights = {v: math.exp(-1.5 * abs(v - target)) for v in range(1, 11)}
        assert read.score == pytest.approx(sum(v * w for v, w in weights.items()) / sum(weights.values()))
    shares = json.loads(good.raw_text)
    assert sum(shares[f"p_{v}"] for v in range(1, 11)) == pytest.approx(1.0)
    assert max(range(1, 11), key=lambda v: shares[f"p_{v}"]) == 9
    # a sampled panel still samples the same judge
    sampled_backend = ScriptedBackend("j", lambda request: '{"reasoning": "x", "score": 5}')
    (sampled,) = _read_ratings(sampled_backend, template, ["/home/user"], panel_reads_probabilities=False)
    assert sampled.mode == "rating" and sampled.score == 5.0
    assert all(request.scoring is None for request in sampled_backend.requests)


def test_a_read_rating_that_does_not_fit_tries_the_shorter_prompt() -> None:
    template = load_judge_template(REPO / "judges" / "simulbench_rating.toml")
    assert isinstance(template, RatingTemplate)
    full = sum(len(m.content) for m in judge_messages(template, _RATED | {"response": "ok"}))
    backend = ScriptedBackend("j", lambda request: "", context_chars=full - 1)
    (record,) = _read_ratings(backend, template, ["ok"])
    assert record.parsed and record.score is not None
    assert all("long history" not in request.messages[-1].content for request in backend.requests[10:])
    tiny = ScriptedBackend("j", lambda request: "", context_chars=10)
    (unjudged,) = _read_ratings(tiny, template, ["ok"])
    assert not unjudged.parsed and unjudged.score is None and "not judged" in unjudged.raw_text


@pytest.mark.real_model
def test_a_read_rating_on_the_real_model_is_a_distribution_over_the_scale_and_batch_invariant(
    smollm2: LlamaCppBackend,
) -> None:
    template = load_judge_template(REPO / "judges" / "simulbench_rating.toml")
    assert isinstance(template, RatingTemplate)
    replies = ["/home/user", "I am sorry, I cannot help with that request."]
    together = _read_ratings(smollm2, template, replies)
    smollm2.forget_caches()
    alone = [_read_ratings(smollm2, template, [reply])[0] for reply in replies]
    for read in together:
        assert read.parsed and read.score is not None and 1.0 <= read.score <= 10.0
        shares = json.loads(read.raw_text)
        assert sum(shares[f"p_{v}"] for v in range(1, 11)) == pytest.approx(1.0)
        assert shares["entropy"] > 0.0
    assert together[0].score != together[1].score  # the two replies are read differently
    assert [r.raw_text for r in together] == [r.raw_text for r in alone]  # the same bits, batched or alone


def test_a_likelihood_panel_rates_label_sets_with_probability_templates_by_default() -> None:
    panels = load_panels(REPO / "judges" / "panels.toml")
    kinds: tuple[LabelKind, ...] = ("turn", "dialogue", "pairwise")
    chosen = {
        (panel, kind): default_template(LabelSet("s", kind, "jsonl", "", [], []), panels[panel])
        for panel in ("default", "sampled")
        for kind in kinds
    }
    assert chosen == {
        ("default", "turn"): panels["default"].likelihood_template,  # what its runs read, so calibrations apply
        ("default", "dialogue"): "dialogue_followups",
        ("default", "pairwise"): "instruction_likelihood",
        ("sampled", "turn"): "turn_rating",
        ("sampled", "dialogue"): "dialogue_rating",
        ("sampled", "pairwise"): "pairwise_preference",
    }
    assert panels["default"].likelihood_template == "turn_followups_8"


def test_a_likelihood_panel_reads_yes_no_checks_and_preferences_by_probability() -> None:
    """Hand-set log-probabilities: yes -ln 4 against no -ln(4/3) gives P(yes) = 0.25 (1/4 over 1/4 + 3/4);
    A -0.1, B -2.3, tie -5 gives the preference A, P(A) - P(B) stored beside it."""
    scored: dict[str, float] = {
        '{"answer": "yes"}': -math.log(4),
        '{"answer": "no"}': -math.log(4 / 3),
        '{"better": "A"}': -0.1,
        '{"better": "B"}': -2.3,
        '{"better": "tie"}': -5.0,
    }

    def scorer(request: GenerationRequest) -> TokenScores:
        assert request.scoring is not None
        return TokenScores(token_logprobs=(scored[request.scoring.continuation],), choice_logprobs=())

    backend = ScriptedBackend("j", lambda request: "unused: nothing is sampled", scorer=scorer)
    scheduler = Scheduler({"j": backend})
    ctx = EpisodeContext("e", 0, scheduler, {"judge:j": RoleBinding("j")}, likelihood_template="turn_followups")
    check = load_judge_template(REPO / "judges" / "challenging_turn.toml")
    prefer = load_judge_template(REPO / "judges" / "pairwise_preference.toml")
    assert isinstance(check, YesNoTemplate) and isinstance(prefer, PairwiseTemplate)
    variables = {"task": "t", "history": "h", "request": "r", "reply": "x", "instruction": "do", "input": "i"}

    async def run() -> tuple[list[JudgmentRecord], PairVerdict]:
        asked = asyncio.gather(
            ask_judge(ctx, check, variables, judge_model="j", panel="p", target_idx=1),
            judge_pair(ctx, prefer, variables, "first", "second", judge_model="j", panel="p", target_idx=1),
        )
        work = asyncio.ensure_future(asked)
        await scheduler.drive(work)
        return tuple(await work)  # type: ignore[return-value]

    records, pair = asyncio.run(run())
    assert all(request.scoring is not None for request in backend.requests)  # nothing sampled
    (yes,) = records
    assert (yes.mode, yes.criterion, yes.parsed) == ("expected", "yes", True)
    assert yes.score == pytest.approx(0.25) and json.loads(yes.raw_text)["p_no"] == pytest.approx(0.75)
    # both orders read "A" (the judge prefers position A whatever it holds): the first response wins one
    # order and loses the other, so the pair is inconsistent and the judge position-biased
    assert (pair.original, pair.swapped) == (1.0, -1.0) and pair.outcome == "inconsistent" and pair.position_biased
    (a_first,) = [j for j in ctx.judgments if j.criterion == "preference" and not j.order_swapped]
    read = json.loads(a_first.raw_text)
    total = math.exp(-0.1) + math.exp(-2.3) + math.exp(-5.0)
    assert read["preference"] == pytest.approx((math.exp(-0.1) - math.exp(-2.3)) / total)
    assert read["p_tie"] == pytest.approx(math.exp(-5.0) / total)


def test_a_calibration_transfers_unrefitted_to_another_label_set(tmp_path: Path) -> None:
    catalog = load_catalog(REPO / "models.toml")
    duo = Panel(name="duo", judges=["smollm2-135m", "gemma3-270m"])
    with Store.open(tmp_path / "db.duckdb") as store:
        import_rows(store, tmp_path, feature_rows())
        source = calibrate_features(store).record
        # The same replies under other ids, rated the other way round on another scale: a transfer that read
        # the source's labels, or refitted on these, could not come out strongly negative.
        other = tmp_path / "other.jsonl"
        rows = []
        for row in feature_rows():
            labels = [label | {"value": 5.0 - label["value"]} for label in row["labels"]]
            rows.append(row | {"item_id": f"other-{row['item_id']}", "labels": labels})
        other.write_text("\n".join(json.dumps(row) for row in rows))
        (label_set,) = read_labels(other, "jsonl", name="reversed", kind="turn")
        write_label_set(store, label_set, "reversed")

        def transfer(panel: Panel, calibration_id: str, **options: Any) -> dict[str, Any]:
            request = CalibrationRequest(panel, "reversed", criterion="overall", seed=3, resamples=200, **options)
            return run_transfer(
                store, catalog, request, calibration_id, REPO / "judges", backend_factory=feature_judges
            )

        found = transfer(duo, source.calibration_id)
        assert (found["items"], found["template"], found["fitted_on"]["label_set"]) == (
            48,
            "turn_likelihood",
            "synthetic",
        )
        assert found["panel_transferred"]["spearman"]["value"] < -0.9
        assert found["panel_transferred"]["n"] == 48 and found["human_ceiling"]["annotators"] == 2
        assert store.query("SELECT count(*) FROM calibrations")[0][0] == 1  # nothing fitted, nothing stored
        with pytest.raises(ApplianceError, match="has judges"):
            transfer(Panel(name="one", judges=["smollm2-135m"]), source.calibration_id)
        with pytest.raises(ApplianceError, match="no calibration 'cal-none'"):
            transfer(duo, "cal-none")
        with pytest.raises(ApplianceError, match="--curve and --transfer"):
            transfer(duo, source.calibration_id, curve=True)
        # A shipped calibration is found by its id too, and rated with its own template.
        shipped = judges_dir_record("turn_followups_8__fed-turn__Overall.json")
        default = Panel(name="default", judges=shipped.judges)
        found = transfer(default, shipped.calibration_id, limit=8)
        assert (found["calibration_id"], found["template"], found["items"]) == (
            shipped.calibration_id,
            "turn_followups_8",
            8,
        )
        assert found["fitted_on"]["heldout_spearman"] == shipped.metrics["panel_calibrated"]["spearman"]


def judges_dir_record(name: str) -> CalibrationRecord:
    return CalibrationRecord.model_validate_json((REPO / "judges" / "calibrations" / "default" / name).read_text())


#: a judge's read of a pair through a template
PairRead = Callable[[ModelClient, LikelihoodTemplate], Awaitable[dict[str, float]]]


def _read(backend: Backend, read: PairRead) -> dict[str, float]:
    """What `read` gets from `backend`'s model as judge, through instruction_likelihood.toml."""
    template = load_judge_template(REPO / "judges" / "instruction_likelihood.toml")
    assert isinstance(template, LikelihoodTemplate) and template.comparison_prompt
    scheduler = Scheduler({backend.name: backend})
    client = ModelClient("pair", 0, scheduler, {f"judge:{backend.name}": RoleBinding(backend.name)})

    async def run() -> dict[str, float]:
        work = asyncio.ensure_future(read(client, template))
        await scheduler.drive(work)
        return await work

    return asyncio.run(run())


def _compared(backend: Backend, variables: dict[str, str]) -> dict[str, float]:
    """`comparison_features` of a pair."""
    return _read(backend, lambda client, template: comparison_features(client, template, variables, backend.name, "c"))


def _pair_read(backend: Backend, variables: dict[str, str], needed: frozenset[str] | None) -> dict[str, float]:
    """`pair_reading` of a pair for the features `needed` (None: every feature)."""
    return _read(backend, lambda client, template: pair_reading(client, template, variables, backend.name, "p", needed))


GOOD_FIRST = {"context": "Say something kind.", "response_a": "a good reply", "response_b": "a poor reply"}


def _comparison_reads(lean: Callable[[str, str], float]) -> dict[str, float]:
    """`comparison_features` of a pair whose first response is good, from a judge whose log P(A) - log P(B)
    is `lean(shown as A, shown as B)`."""

    def scorer(request: GenerationRequest) -> TokenScores:
        assert request.scoring is not None and request.prompt is not None
        shown_a = request.prompt.split("Response A:")[1].split("Response B:")[0]
        shown_b = request.prompt.split("Response B:")[1]
        return TokenScores(choice_logprobs=(lean(shown_a, shown_b), 0.0))

    backend = ScriptedBackend("j", lambda request: "unused", scorer=scorer)
    reads = _compared(backend, GOOD_FIRST)
    assert [r.scoring.choices for r in backend.requests if r.scoring] == [(" A", " B")] * 2  # both orders
    return reads


def test_a_comparison_read_in_both_orders_keeps_the_preference_and_cancels_the_slot() -> None:
    """A judge that sees which reply is good leans to it wherever it is shown: the preference is its
    lean and the position lean 0. A judge that always says A has no preference, only a position lean."""
    seeing = _comparison_reads(lambda a, b: 2.0 if "good" in a else -2.0)
    assert seeing == {"preference": pytest.approx(2.0), "position_lean": pytest.approx(0.0)}
    slot = _comparison_reads(lambda a, b: 1.5)
    assert slot == {"preference": pytest.approx(0.0), "position_lean": pytest.approx(1.5)}
    # a judge that sees the good reply and leans to A besides: both parts apart
    both = _comparison_reads(lambda a, b: (2.0 if "good" in a else -2.0) + 0.5)
    assert both == {"preference": pytest.approx(2.0), "position_lean": pytest.approx(0.5)}


@pytest.mark.real_model
def test_the_comparison_read_on_the_real_model(smollm2: LlamaCppBackend) -> None:
    """SmolLM2 reads " A" and " B" as one token each; swapping the responses swaps the preference's sign
    and keeps the position lean, to the float error of two orders read in one batch."""
    pair = {
        "context": "Name the capital of France.",
        "response_a": "The capital of France is Paris.",
        "response_b": "Bananas are yellow.",
    }
    straight = _compared(smollm2, pair)
    swapped = _compared(smollm2, pair | {"response_a": pair["response_b"], "response_b": pair["response_a"]})
    assert all(math.isfinite(v) for v in (*straight.values(), *swapped.values()))
    assert straight["preference"] == pytest.approx(-swapped["preference"], abs=1e-3)
    assert straight["position_lean"] == pytest.approx(swapped["position_lean"], abs=1e-3)
    assert straight["preference"] != 0.0


def test_a_short_pair_read_gives_the_scripted_backends_full_numbers_too() -> None:
    """The scripted backend scores a character a token, as it counts them: the golden runs' comparisons
    read the short way hold the numbers a full read gives."""
    backend = ScriptedBackend("j", lambda request: "unused")
    full = _pair_read(backend, GOOD_FIRST, None)
    short = _pair_read(backend, GOOD_FIRST, frozenset({"preference", "tokens"}))
    assert short == {name: full[name] for name in short} and full["tokens"] == 0.0
    longer = GOOD_FIRST | {"response_a": "a good and longer reply"}
    counted = _pair_read(backend, longer, frozenset({"tokens"}))["tokens"]
    difference = len(longer["response_a"]) - len(longer["response_b"])
    assert counted == _pair_read(backend, longer, None)["tokens"] == difference


@pytest.mark.real_model
def test_a_pair_read_for_preference_and_length_alone_gives_the_full_reads_numbers(smollm2: LlamaCppBackend) -> None:
    """A calibration on direct preference and length (the shipped default's) needs no response read on its
    own: the comparison's two requests, and the length difference from the judge's tokenizer, give the
    same numbers the full read gives, with a fraction of its requests."""
    pair = {
        "context": "Name the capital of France.",
        "response_a": "The capital of France is Paris, a city on the Seine.",
        "response_b": "Bananas.",
    }
    asked = smollm2.counters.requests
    full = _pair_read(smollm2, pair, None)
    full_requests, asked = smollm2.counters.requests - asked, smollm2.counters.requests
    short = _pair_read(smollm2, pair, frozenset({"preference", "tokens"}))
    short_requests = smollm2.counters.requests - asked
    assert short_requests == 2 and full_requests > 2 * short_requests, (short_requests, full_requests)
    assert set(short) == {"preference", "position_lean", "tokens"} and set(short) < set(full)
    assert short["tokens"] == full["tokens"] > 0
    assert short["preference"] == pytest.approx(full["preference"], abs=1e-3)
    assert short["position_lean"] == pytest.approx(full["position_lean"], abs=1e-3)


@pytest.mark.parametrize("panel_name", ["default", "large"])
def test_both_shipped_pairwise_calibrations_apply_to_their_panel_and_read_the_short_way(panel_name: str) -> None:
    """`default` and `large` each ship a PandaLM calibration of `instruction_likelihood` for their own judges,
    current with the template, and it reads only what a short pair read gives (so runs ask two requests)."""
    from appliance.calibration.apply import shipped_calibrations, template_fingerprint
    from appliance.calibration.features import PairFeatureCalibration
    from appliance.calibration.models import calibration_from_json
    from appliance.judging.scoring import SHORT_READ_FEATURES

    panel = load_panels(REPO / "judges" / "panels.toml")[panel_name]
    (record,) = [r for r in shipped_calibrations(REPO / "judges", panel, "instruction_likelihood")]
    assert (record.label_set, record.criterion) == ("pandalm", "preference")
    assert record.model["template_fingerprint"] == template_fingerprint(REPO / "judges", "instruction_likelihood")
    calibration = calibration_from_json(record.model)
    assert isinstance(calibration, PairFeatureCalibration)
    needed = calibration.features_by_judge()
    assert set(needed) == set(panel.judges) and all(set(names) <= SHORT_READ_FEATURES for names in needed.values())
    held_out, length = record.metrics["panel_calibrated"], record.metrics["length_baseline"]
    assert held_out["agreement"]["value"] > length["agreement"]["value"] and held_out["kappa"]["ci"][0] > 0
