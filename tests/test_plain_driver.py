"""The plain driver (each phase one batch over every conversation, no scheduler or store) plays the
same PingPong requests as the appliance, on the real SmolLM2."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.bench.backend_bench import llama_cpp_twin
from appliance.bench.e2e import ArmResult, EndToEndResult, with_side_arm
from appliance.bench.plain_driver import plain_pingpong
from appliance.catalog.models import load_catalog
from appliance.catalog.panels import Panel
from appliance.errors import ApplianceError
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import load_family
from appliance.scenarios.pingpong.family import PingPongFamily
from appliance.store import Store
from tests.test_cli import REPO

LIKELIHOOD = Panel(name="p", judges=["smollm2-135m"], judging="likelihood", likelihood_template="turn_likelihood")


def pingpong() -> PingPongFamily:
    family = load_family("pingpong")
    assert isinstance(family, PingPongFamily)
    return family


def test_the_plain_driver_sends_the_appliances_requests_and_gets_its_messages(tmp_path: Path) -> None:
    catalog = load_catalog(REPO / "models.toml")
    family = pingpong()
    config = RunConfig(
        scenarios=["pingpong"], players=["smollm2-135m"], interrogator="smollm2-135m", panel=LIKELIHOOD, seed=3,
        limit=2, parallel=2, greedy=True, turns=1, models_file=str(catalog.source),
    )  # fmt: skip
    with Store.open(tmp_path / "run.duckdb") as store:
        summary = Runner(catalog, store).execute(config, [family])
        stored = [text for key, _, text in store.run_transcript(summary.run_id) if not key.endswith("/verdict")]
    plain, texts = plain_pingpong(
        catalog, family, conversations=2, turns=1, player="smollm2-135m", interrogator="smollm2-135m",
        panel=LIKELIHOOD, seed=3,
    )  # fmt: skip
    # 2 conversations of 1 turn: a question and a reply each; greedy on llama.cpp's exact mode, the same
    # texts from the same requests, token for token
    assert len(stored) == 4 and sorted(texts) == sorted(stored)
    assert plain.episodes == 2 and plain.decode_tokens == summary.completion_tokens
    assert plain.prefill_tokens + plain.cached_prompt_tokens == summary.prompt_tokens
    # its own peak memory: the model's weights (a mapped file, read whole) were resident inside the arm
    weights_mb = catalog.resolve_path(catalog.get("smollm2-135m")).stat().st_size / 2**20
    assert plain.start_rss_mb < plain.peak_rss_mb and plain.peak_rss_mb >= weights_mb
    # the bench's arm beside the appliance's: its wall time ratio and the messages that differ
    appliance = ArmResult(wall_s=2 * plain.wall_s, episodes=2, episodes_per_hour=0, prefill_tokens=0,
                          cached_prompt_tokens=0, decode_tokens=0, peak_kv_cells=0)  # fmt: skip
    e2e = EndToEndResult(
        conversations=2, turns=1, players=["smollm2-135m"], panel=["smollm2-135m"], appliance=appliance,
        baseline=appliance, speedup=1.0, transcripts_identical=True, messages_compared=4, messages_differing=0,
        message_texts=[*stored[:3], "a message the plain driver never wrote"],
    )  # fmt: skip
    both = with_side_arm(e2e, "plain", plain, texts)
    assert both.plain == plain and both.speedup_vs_plain == pytest.approx(0.5)
    assert both.plain_messages_differing == 2  # the stray message on one side, the real fourth on the other


def test_a_vllm_entry_has_the_llama_cpp_entry_of_its_gguf_as_twin() -> None:
    """The vLLM bench's llama.cpp arm plays each vLLM model's twin: the llama_cpp entry of the same GGUF,
    never a LoRA entry on it."""
    catalog = load_catalog(REPO / "models.toml")
    twins = {name: llama_cpp_twin(catalog, catalog.get(name)) for name in catalog.models}
    found = {name: twin.name for name, twin in twins.items() if twin is not None and twin.name != name}
    qwen = {
        f"qwen2.5-coder-{size}{suffix}": f"qwen2.5-coder-{size}"
        for size in ("0.5b", "1.5b")
        for suffix in ("-hf", "-vllm")
    }
    assert found == {"smollm2-135m-vllm": "smollm2-135m", "gemma3-270m-vllm": "gemma3-270m", **qwen}
    assert twins["smollm2-135m"] is catalog.get("smollm2-135m")


def test_the_plain_driver_refuses_a_panel_of_sampled_verdicts() -> None:
    catalog = load_catalog(REPO / "models.toml")
    sampled = Panel(name="s", judges=["smollm2-135m"])
    with pytest.raises(ApplianceError, match=r"^panel 's': the plain driver plays likelihood panels only$"):
        plain_pingpong(
            catalog, pingpong(), conversations=1, turns=1, player="smollm2-135m", interrogator="smollm2-135m",
            panel=sampled, seed=0,
        )  # fmt: skip
