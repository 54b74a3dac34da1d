"""Synthetic-weight models: built on CPU from a shape, usable by `appliance bench backend transformers`,
refused for every role of a run, a rescoring and a calibration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.bench.e2e import sequential_backend
from appliance.catalog.models import load_catalog
from appliance.catalog.panels import Panel
from appliance.catalog.synthetic_shapes import PRESETS
from appliance.engine.synthetic import ByteTokens
from appliance.engine.transformers_backend import TransformersBackend, transformers_backend_for
from appliance.engine.types import GenerationRequest, Message, ResolvedSampling
from appliance.errors import ApplianceError
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import load_family
from appliance.store import Store
from tests.test_cli import REPO, assert_clean_error, cli

TINY = "{ layers = 2, hidden_size = 64, heads = 4, kv_heads = 2, vocab_size = 512 }"


def models_with_synthetic(tmp_path: Path) -> Path:
    models = tmp_path / "models.toml"
    shipped = (REPO / "models.toml").read_text(encoding="utf-8")
    models.write_text(f'{shipped}\n[models.tiny]\nbackend = "transformers"\nsynthetic = {TINY}\nslots = 8\n')
    return models


def test_a_synthetic_model_builds_on_cpu_and_decodes_its_byte_ids(tmp_path: Path) -> None:
    spec = load_catalog(models_with_synthetic(tmp_path)).get("tiny")
    assert spec.synthetic_shape is not None and spec.synthetic_shape.layers == 2
    assert PRESETS["llama-1b"].parameters() == pytest.approx(1.24e9, rel=0.01)  # Llama 3.2 1B's published size
    assert PRESETS["llama-8b"].parameters() == pytest.approx(8.03e9, rel=0.01)
    runs = []
    for _ in range(2):  # the same seeded random weights each time
        backend = TransformersBackend(None, name="tiny", synthetic=spec.synthetic_shape, slots=4)
        request = GenerationRequest(
            messages=(Message(role="user", content="héllo"),),
            sampling=ResolvedSampling(temperature=0.0, max_tokens=6, ignore_eos=True),
        )
        backend.submit(request)
        done = []
        while backend.busy:
            done.extend(backend.step())
        runs.append(done[0][1])
        backend.close()
    assert runs[0].completion_tokens == 6 and runs[0].text == runs[1].text
    assert runs[0].prompt_tokens > len(ByteTokens().encode("héllo")) == 6  # one id per UTF-8 byte, plus the framing


def test_a_run_refuses_a_synthetic_model_in_any_role(tmp_path: Path) -> None:
    catalog = load_catalog(models_with_synthetic(tmp_path))
    family = load_family("pingpong")
    base = RunConfig(
        scenarios=["pingpong"],
        players=["smollm2-135m"],
        interrogator="smollm2-135m",
        panel=Panel(name="p", judges=["smollm2-135m"]),
        limit=1,
        models_file=str(catalog.source),
    )
    for role in (
        {"players": ["tiny"]},
        {"interrogator": "tiny"},
        {"panel": Panel(name="p", judges=["smollm2-135m", "tiny"])},
    ):
        with Store.open(tmp_path / "db.duckdb") as store:
            with pytest.raises(ApplianceError, match=r"'tiny' has synthetic .* cannot be used in a run"):
                Runner(catalog, store).execute(base.model_copy(update=role), [family])
            assert store.query("SELECT count(*) FROM runs")[0][0] == 0  # refused before anything was written


def test_bench_runs_on_cpu_with_the_transformers_backend(tmp_path: Path) -> None:
    models = models_with_synthetic(tmp_path)
    out = tmp_path / "bench"
    result = cli("bench", "backend", "transformers", "--model", "tiny", "--models", str(models), "--quick", "--out",
                 str(out), "--json", "--repeats", "2", "--conversations", "3", "--sequences", "1,3")  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    # the options resize the quick plan, the rest of it kept
    assert (report["plan"]["repeats"], report["plan"]["conversations"], report["plan"]["turns"]) == (2, 3, 1)
    assert report["backend"] == "transformers" and report["synthetic"] is True
    assert report["device"]["device"] == "cpu" and report["versions"]["torch"].startswith("2.13")
    assert [p["sequences"] for p in report["decode"]] == [1, 3]
    assert all(p["engine_tokens_per_s"] > 0 and p["bare_tokens_per_s"] > 0 for p in report["decode"])
    assert all(p["ratio"] == pytest.approx(p["engine_tokens_per_s"] / p["bare_tokens_per_s"]) for p in report["decode"])
    assert all(p["engine_tokens_per_s"] > 0 for p in report["prefill"])
    # float32 on the CPU: a reply does not depend on its batch (a GPU in bfloat16 may part them)
    assert report["invariance"] == {"prompts": 4, "new_tokens": 16, "identical": 4, "first_difference": []}
    assert report["weight_bytes"] == 4 * report["parameters"]  # float32 weights, read once per decode step
    written = sorted(path.suffix for path in out.iterdir())
    assert written == [".json", ".md"] and "synthetic" in next(out.glob("*.md")).read_text()


def test_bench_backend_and_model_mistakes_are_one_line(tmp_path: Path) -> None:
    models = models_with_synthetic(tmp_path)
    assert_clean_error(cli("bench", "backend", "onnx", "--model", "tiny", "--models", str(models)), "BACKEND", "onnx")
    assert_clean_error(cli("bench", "backend", "transformers", "--models", str(models)), "--model")
    wrong = cli("bench", "backend", "transformers", "--model", "smollm2-135m", "--models", str(models))
    assert_clean_error(wrong, "--model", "llama_cpp")
    sampled = cli("bench", "backend", "vllm", "--model", "smollm2-135m-vllm", "--panel", "sampled")
    assert_clean_error(sampled, "--panel", "'sampled' samples verdicts")
    bad = tmp_path / "bad.toml"
    bad.write_text('[models.x]\nsynthetic = "llama-1b"\n')
    assert_clean_error(cli("models", "list", "--models", str(bad)), "field 'synthetic'", "transformers")


def test_the_stateless_baseline_keeps_no_turn_but_the_engine_does(tmp_path: Path) -> None:
    """The bench's baseline arm on the transformers backend prefills every turn from scratch."""
    catalog = load_catalog(models_with_synthetic(tmp_path))
    spec = catalog.get("tiny")
    sampling = ResolvedSampling(temperature=0.0, max_tokens=4, ignore_eos=True)
    first = (Message(role="user", content="one"),)
    second = (*first, Message(role="assistant", content="two"), Message(role="user", content="three"))
    cached = []
    for backend in (transformers_backend_for(catalog, spec, slots=2), sequential_backend(catalog, spec, reuse=False)):
        for messages in (first, second):
            backend.submit(GenerationRequest(messages=messages, sampling=sampling, conversation_key="c"))
            done = []
            while backend.busy:
                done.extend(backend.step())
        cached.append(done[0][1].cached_prompt_tokens)
        backend.close()
    assert cached[0] > 0 and cached[1] == 0
