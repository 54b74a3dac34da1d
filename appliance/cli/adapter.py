"""`appliance adapter to-gguf`: a lab's PEFT LoRA made loadable by the llama.cpp backend."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from appliance.cli.options import ModelsOption, console, load_models

adapter_app = typer.Typer(no_args_is_help=True, help="LoRA adapters: converted for llama.cpp.")


@adapter_app.command("to-gguf")
def adapter_to_gguf(
    folder: Annotated[Path, typer.Argument(help="a PEFT adapter folder (adapter_config.json + safetensors)")],
    base: Annotated[str, typer.Option("--base", help="the models.toml entry (a GGUF) the adapter was trained on")],
    out: Annotated[
        Path | None, typer.Option("--out", help="the GGUF LoRA to write (default FOLDER/adapter.gguf)")
    ] = None,
    models: ModelsOption = None,
) -> None:
    """Write the adapter as a GGUF LoRA beside its PEFT files, so one folder serves every backend."""
    from appliance.adapters.gguf_lora import peft_to_gguf

    catalog = load_models(models)
    spec = catalog.get(base)
    written = peft_to_gguf(folder, catalog.resolve_path(spec), out or folder / "adapter.gguf")
    console.print(f"wrote {written} (LoRA for '{base}', {written.stat().st_size / 1e6:.1f} MB)")
