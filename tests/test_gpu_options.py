"""GPU options in models.toml, tested without a GPU: each is parsed for its backend, refused for
another with one line naming the field, and reaches the backend's own arguments; a GPU request that
this machine's builds cannot honour is a clear error, not a silent CPU run."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import pytest
import torch

from appliance.catalog.backends import LlamaCppOptions, TransformersOptions
from appliance.catalog.models import load_catalog
from appliance.engine.hf_loading import model_placement
from appliance.engine.vllm_backend import vllm_engine_options
from tests.test_cli import assert_clean_error, cli


def catalog_of(tmp_path: Path, body: str) -> Path:
    models = tmp_path / "models.toml"
    models.write_text(f"[models.m]\n{body}\n", encoding="utf-8")
    return models


def test_each_backend_reads_its_own_gpu_options(tmp_path: Path) -> None:
    llama = load_catalog(catalog_of(tmp_path, 'backend = "llama_cpp"\npath = "m.gguf"\ngpu_layers = -1')).get("m")
    assert llama.options_as(LlamaCppOptions).gpu_layers == -1
    hf_toml = (
        'backend = "transformers"\npath = "hf"\ndevice = "cuda:1"\ndtype = "bfloat16"\nattn_implementation = "sdpa"'
    )
    hf = load_catalog(catalog_of(tmp_path, hf_toml)).get("m").options_as(TransformersOptions)
    assert model_placement(torch, hf.device, hf.dtype, hf.attn_implementation) == {
        "dtype": torch.bfloat16,
        "attn_implementation": "sdpa",
    }
    assert model_placement(torch, "auto", "auto", None) == {"dtype": "auto", "device_map": "auto"}
    assert model_placement(torch, None, None, None) == {"dtype": torch.float32}
    vllm_lines = ['backend = "vllm"', 'path = "w"', "tensor_parallel_size = 4", "pipeline_parallel_size = 2"]
    vllm_toml = "\n".join([*vllm_lines, "gpu_memory_utilization = 0.8"])
    vllm = load_catalog(catalog_of(tmp_path, vllm_toml)).get("m")
    assert vllm_engine_options(vllm) == {
        "tensor_parallel_size": 4,
        "pipeline_parallel_size": 2,
        "gpu_memory_utilization": 0.8,
        "dtype": "float32",
    }
    half = load_catalog(catalog_of(tmp_path, 'backend = "vllm"\npath = "w"\ndtype = "bfloat16"')).get("m")
    assert vllm_engine_options(half) == {"dtype": "bfloat16"}  # vLLM's own defaults for the rest


@pytest.mark.parametrize(
    ("body", "fragments"),
    [
        ('backend = "llama_cpp"\npath = "m.gguf"\ndevice = "cuda"', ("field 'device'", "transformers", "llama_cpp")),
        ('backend = "transformers"\npath = "hf"\ngpu_layers = 10', ("field 'gpu_layers'", "llama_cpp")),
        ('backend = "llama_cpp"\npath = "m.gguf"\ntensor_parallel_size = 2', ("field 'tensor_parallel_size'", "vllm")),
        ('backend = "transformers"\npath = "hf"\ndevice = "gpu0"', ("field 'device'", "gpu0")),
        ('backend = "transformers"\npath = "hf"\ndtype = "float8"', ("field 'dtype'",)),
        ('backend = "vllm"\npath = "w"\ngpu_memory_utilization = 1.5', ("field 'gpu_memory_utilization'",)),
        ('backend = "llama_cpp"\npath = "m.gguf"\ngpu_layers = -2', ("field 'gpu_layers'",)),
        ('backend = "vllm"\npath = "w"\nhost_cache_mb = 256', ("field 'host_cache_mb'", "llama_cpp")),
        ('backend = "llama_cpp"\npath = "m.gguf"\nhost_cache_mb = -1', ("field 'host_cache_mb'",)),
    ],
)
def test_a_bad_gpu_option_is_one_line_naming_the_field(tmp_path: Path, body: str, fragments: tuple[str, ...]) -> None:
    result = cli("models", "list", "--models", str(catalog_of(tmp_path, body)))
    assert_clean_error(result, "models.toml", *fragments)
    assert "top level" not in result.stderr and "Value error" not in result.stderr  # the field, in plain words


@pytest.mark.real_model
def test_gpu_layers_on_a_build_without_gpu_offload_is_a_clear_error(tmp_path: Path, smollm2_path: Path) -> None:
    if llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama-cpp-python build offloads to a GPU: the refusal cannot be shown here")
    models = catalog_of(tmp_path, f'backend = "llama_cpp"\npath = "{smollm2_path}"\ngpu_layers = 8')
    result = cli("models", "check", "m", "--models", str(models), "--tokens", "2")
    assert_clean_error(result, "gpu_layers", "CMAKE_ARGS=-DGGML_CUDA=on")
    cpu = cli("models", "check", "m", "--models", str(catalog_of(tmp_path, f'path = "{smollm2_path}"\ngpu_layers = 0')))
    assert cpu.returncode == 0, cpu.stderr  # 0 layers on the GPU is a CPU run, allowed everywhere


def test_a_gpu_device_torch_cannot_reach_is_a_clear_error(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this torch sees a CUDA GPU: the refusal cannot be shown here")
    body = 'backend = "transformers"\nsynthetic = "llama-135m"\ndevice = "cuda"'
    result = cli("models", "check", "m", "--models", str(catalog_of(tmp_path, body)), "--tokens", "2")
    assert_clean_error(result, "'m'", "device", "cuda is not available")
    on_cpu = catalog_of(tmp_path, body.replace("cuda", "cpu"))
    cpu = cli("models", "check", "m", "--models", str(on_cpu), "--tokens", "2")
    assert cpu.returncode == 0, cpu.stderr  # the same synthetic model on the CPU opens and decodes
