"""Does the installed llama.cpp run on this CPU? `make install` asks once, after building it.

llama-cpp-python compiles llama.cpp for the building CPU, and picks instructions at build time.
On a Sapphire Rapids virtual machine here, llama.cpp's AMX matrix multiply died with SIGILL on the
first prompt (a small AMX program ran there), so `make install` builds it without AMX. A wheel
built on another CPU and found in pip's cache can fail the same way. The check prefills a short
prompt (the batched matrix multiply that died) and decodes two tokens of the embedded SmolLM2; a
crash exits non-zero, and `make install` drops the cached wheel and rebuilds llama.cpp once.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    import llama_cpp

    from appliance.catalog.models import DEFAULT_MODELS_FILE, load_catalog

    catalog = load_catalog(REPO / DEFAULT_MODELS_FILE)
    path = catalog.resolve_path(catalog.get("smollm2-135m"))
    model = llama_cpp.Llama(str(path), n_ctx=128, n_batch=64, n_threads=1, verbose=False)
    prompt = "The appliance checks that llama.cpp runs on this processor before any test uses it:"
    model(prompt, max_tokens=2, temperature=0.0)
    print(f"llama.cpp {llama_cpp.__version__} runs on this CPU ({llama_cpp.llama_print_system_info().decode()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
