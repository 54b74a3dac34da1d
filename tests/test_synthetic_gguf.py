"""A synthetic-weight GGUF (a shape with random weights and a real tokenizer) and the decode-only bench on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.bench.synthetic_gguf import write_synthetic_gguf
from appliance.catalog.synthetic_shapes import SyntheticShape
from appliance.engine.llama_cpp_backend import LlamaCppBackend
from appliance.engine.llama_native import LlamaModel
from appliance.engine.types import Completion, GenerationRequest, ResolvedSampling
from tests.test_cli import assert_clean_error, cli

#: two layers, a vocabulary 48 tokens larger than SmolLM2's (filler tokens appended)
TINY = SyntheticShape(layers=2, hidden_size=64, heads=4, kv_heads=2, intermediate_size=128, vocab_size=49_200)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Path:
    return write_synthetic_gguf(smollm2_path, TINY, tmp_path_factory.mktemp("gguf") / "tiny.gguf", weight_type="Q8_0")


@pytest.mark.real_model
def test_a_synthetic_gguf_has_the_shape_and_tokenizes_like_its_donor(tiny_gguf: Path, smollm2_path: Path) -> None:
    import gguf

    reader = gguf.GGUFReader(tiny_gguf)
    assert reader.fields["llama.block_count"].contents() == 2
    assert len(reader.tensors) == 2 * 9 + 2  # nine per layer, the embedding and the final norm (tied output)
    types = {tensor.name: tensor.tensor_type.name for tensor in reader.tensors}
    assert types["blk.0.ffn_up.weight"] == "Q8_0" and types["blk.1.attn_norm.weight"] == "F32"
    text = "Which city hosted the 1936 Summer Olympics?"
    synthetic, donor = LlamaModel(tiny_gguf, "tiny"), LlamaModel(smollm2_path, "donor")
    try:
        assert synthetic.n_vocab == TINY.vocab_size and donor.n_vocab == 49_152
        assert synthetic.tokenize(text, parse_special=True) == donor.tokenize(text, parse_special=True)
        assert synthetic.chat_template == donor.chat_template
    finally:
        synthetic.close()
        donor.close()
    backend = LlamaCppBackend(tiny_gguf, name="tiny", context_length=256, slots=2)
    try:
        sampling = ResolvedSampling(temperature=0.0, max_tokens=6, ignore_eos=True)
        tickets = [backend.submit(GenerationRequest(prompt=text, sampling=sampling)) for _ in range(2)]
        done: dict[int, Completion] = {}
        while backend.busy:
            done.update(backend.step())
        assert [done[t].completion_tokens for t in tickets] == [6, 6]
    finally:
        backend.close()


def test_a_synthetic_gguf_refuses_a_vocabulary_smaller_than_its_donors(tmp_path: Path, smollm2_path: Path) -> None:
    small = TINY.model_copy(update={"vocab_size": 32_000})
    with pytest.raises(ValueError, match="smaller than"):
        write_synthetic_gguf(smollm2_path, small, tmp_path / "x.gguf")
    with pytest.raises(ValueError, match="Q4_K"):
        write_synthetic_gguf(smollm2_path, TINY, tmp_path / "x.gguf", weight_type="Q4_K")


@pytest.mark.real_model
def test_the_decode_only_bench_measures_any_llama_cpp_entry(tmp_path: Path, tiny_gguf: Path) -> None:
    models = tmp_path / "models.toml"
    entry = f'path = "{tiny_gguf}"\n'
    models.write_text(f"[models.tiny]\n{entry}\n[models.tiny-gpu]\n{entry}gpu_layers = -1\n")
    out = tmp_path / "bench"
    result = cli("bench", "decode", "--quick", "--model", "tiny", "--models", str(models), "--out", str(out),
                 "--sequences", "1,3,8", "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["plan"]["model"] == "tiny" and report["model_bytes"] == tiny_gguf.stat().st_size
    assert [p["sequences"] for p in report["decode"]] == [1, 3, 8]  # --sequences replaces the quick plan's 1, 4, 16
    assert len(report["raw_configs"]) == 4 and report["gpu_layers"] is None
    assert all(p["ratio"] == pytest.approx(p["engine_tokens_per_s"] / p["raw_tokens_per_s"]) for p in report["decode"])
    assert sorted(path.suffix for path in out.iterdir()) == [".json", ".md"]
    import llama_cpp

    if llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama-cpp-python build offloads to a GPU: the refusal cannot be shown here")
    refused = cli("bench", "decode", "--quick", "--model", "tiny-gpu", "--models", str(models))
    assert_clean_error(refused, "tiny-gpu", "gpu_layers")


@pytest.mark.real_model
def test_the_scaling_bench_plays_each_size_in_a_process_of_its_own(tiny_gguf: Path, tmp_path: Path) -> None:
    """The end-to-end workload at two sizes, on a synthetic model standing in for both default judges and
    the player (one slot each, so the larger point waits for slots and evicts). The default panel's
    follow-ups make scoring requests that share their conversation's prefix."""
    models = tmp_path / "models.toml"
    entry = f'path = "{tiny_gguf}"\ncontext_length = 2048\nchat_format = "gguf"\nslots = 1\n'
    models.write_text(f"[models.smollm2-135m]\n{entry}\n[models.gemma3-270m]\n{entry}")
    out = tmp_path / "bench"
    result = cli("bench", "scaling", "1,2", "--quick", "--turns", "1", "--models", str(models), "--out", str(out),
                 "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert (report["turns"], report["panel"]) == (1, ["smollm2-135m", "gemma3-270m"])  # --turns over the quick 2
    assert report["engines"] == {"smollm2-135m": [1, 2048, None], "gemma3-270m": [1, 2048, None]}
    points = report["points"]
    assert [(p["conversations"], p["episodes"]) for p in points] == [(1, 1), (2, 2)]
    distinct = [sum(point["ideal"]["workload"]["distinct_prompt_tokens"].values()) for point in points]
    for point, distinct_tokens in zip(points, distinct, strict=True):
        assert 0 < distinct_tokens <= point["prefill_tokens"] + point["cached_prompt_tokens"]
        assert point["decode_tokens"] > 0 and point["peak_kv_cells"] > 0 and point["peak_rss_mb"] > 100
        ideal, work = point["ideal"], point["ideal"]["workload"]
        for judge in ("smollm2-135m", "gemma3-270m"):  # the judges score replies: they read rows, each a tree node
            assert 0 < work["read_rows"][judge] <= work["distinct_prompt_tokens"][judge]
            assert ideal["raw_row_ms"][judge] >= 0 and ideal["raw_prefill_tokens_per_s"][judge] > 0
        assert 0 < ideal["ideal_without_rows_s"] <= ideal["ideal_s"]
        assert ideal["appliance_multiple"] == pytest.approx(point["wall_s"] / ideal["ideal_s"])
    # twice the conversations, about twice the distinct prompt tokens (the instances differ)
    assert distinct[1] > distinct[0] * 1.5
    (markdown,) = out.glob("*-scaling.md")
    rows = [line for line in markdown.read_text().splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 2 and rows[0].split("|")[5].strip() == "1.00"  # the smallest point is its own unit
    assert [int(row.split("|")[8]) for row in rows] == distinct
    assert [int(row.split("|")[12]) for row in rows] == [p["evicted_tokens"] for p in points]
    assert [float(row.split("|")[14]) for row in rows] == [round(p["ideal"]["appliance_multiple"], 2) for p in points]
    assert_clean_error(cli("bench", "scaling", "16,x", "--models", str(models)), "SIZES", "'x'")
    assert_clean_error(cli("bench", "scaling", "0", "--models", str(models)), "SIZES", "'0'")
    assert_clean_error(cli("bench", "decode", "--sequences", "4,-1", "--models", str(models)), "--sequences", "'-1'")
    # the sizes are the conversation counts: the option does not exist here
    assert_clean_error(cli("bench", "scaling", "4", "--conversations", "2", "--models", str(models)), "--conversations")
