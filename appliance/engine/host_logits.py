"""A scoring request's logits rows computed on the host, many llama.cpp calls' rows in one product.

Why: inside `llama_decode`, every call that reads a logits row passes the hidden state through the
model's output matrix, and on a CPU one pass over a large matrix costs about the same for one row as
for ten: Gemma 3's 262,144 x 640 costs some 22 ms a call here (docs/engine.md, "Where each call's
time goes"). Exact mode gives every prefill chunk a call of its own, and a likelihood judge's
follow-ups each read their ten or so rows in one, so that pass was the largest per-call cost left.
With `host_logits`, a call that only reads scored rows stops after the model's final norm
(`HiddenStateTap`); the backend keeps the rows and multiplies those of all the step's calls by the
output matrix at once (`OutputMatrix.logits`).

Exactness: the product is float32 by OpenBLAS's matrix kernel, and a row's result does not depend on
the other rows of the product or where it sits among them, provided there are at least two (one row
takes the matrix-vector kernel, which sums in another order). `OutputMatrix.logits` never multiplies
a row alone. The numbers are not llama.cpp's: llama.cpp quantises the hidden state to 8 bits before
a quantised matrix product, this product does not (up to 0.3 apart in a Gemma 3 logit).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path
from typing import Any

import llama_cpp as C
import numpy as np
from threadpoolctl import ThreadpoolController

from appliance.errors import ApplianceError

#: the name llama.cpp gives the final norm's output (its `t_embd`), the output matrix's input
FINAL_NORM = b"result_norm"
#: most rows in one product: a Gemma 3 row of logits is a megabyte
ROWS_PER_PRODUCT = 128
#: metadata keys of models whose logits are more than the output matrix's product
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale")
#: ggml's tensor types read here, and gguf's type of a float32 value
_F32, _F16, _Q8_0 = 0, 1, 8
_GGUF_FLOAT32 = 6


class _InitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


def _ggml_library() -> Any:
    """ggml's base library, beside llama.cpp's in llama-cpp-python, with the signatures used here."""
    library = ctypes.CDLL(str(Path(C.__file__).parent / "lib" / "libggml-base.so"))
    i64, size, text, handle = ctypes.c_int64, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p
    for name, result, arguments in (
        ("gguf_init_from_file", handle, [text, _InitParams]),
        ("gguf_free", None, [handle]),
        ("gguf_find_key", i64, [handle, text]),
        ("gguf_get_kv_type", ctypes.c_int, [handle, i64]),
        ("gguf_get_val_str", text, [handle, i64]),
        ("gguf_get_val_f32", ctypes.c_float, [handle, i64]),
        ("gguf_find_tensor", i64, [handle, text]),
        ("gguf_get_data_offset", size, [handle]),
        ("gguf_get_tensor_offset", size, [handle, i64]),
        ("gguf_get_tensor_type", ctypes.c_int, [handle, i64]),
        ("gguf_get_tensor_size", size, [handle, i64]),
        ("ggml_get_name", text, [handle]),
        ("ggml_nbytes", size, [handle]),
        ("ggml_backend_tensor_get", None, [handle, handle, size, size]),
    ):
        getattr(library, name).restype = result
        getattr(library, name).argtypes = arguments
    return library


class HiddenStateTap:
    """llama.cpp's graph callback: while `stopping`, a call's graph is computed up to the final norm,
    whose rows are kept, and the rest (the output matrix) is skipped. Otherwise it asks for nothing,
    and llama.cpp computes the graph in one piece as without it.

    Every layer's K and V are written before the final norm, so a stopped call leaves the cache as a
    whole call does (`test_host_logits`)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.stopping = False
        self._captured: list[np.ndarray] = []
        self._ggml = _ggml_library()
        self.callback = C.ggml_backend_sched_eval_callback(self._on_node)

    def install(self, params: Any) -> None:
        """Set the callback on context parameters, before the context is created."""
        params.cb_eval = self.callback
        params.cb_eval_user_data = None

    def _on_node(self, tensor: int, ask: bool, user_data: Any) -> bool:
        if not self.stopping:
            return not ask  # nothing asked for: one piece
        if self._ggml.ggml_get_name(tensor) != FINAL_NORM:
            return not ask
        if ask:
            return True
        size = int(self._ggml.ggml_nbytes(tensor))
        rows = np.empty(size // 4, dtype=np.float32)
        self._ggml.ggml_backend_tensor_get(tensor, rows.ctypes.data, 0, size)
        self._captured.append(rows.reshape(-1, self.width))
        return False  # stop: the output matrix is not computed

    def take(self, model_name: str) -> np.ndarray:
        """The rows the last stopped call kept (one per output row, in batch order)."""
        self.stopping = False
        if not self._captured:
            raise RuntimeError(f"model '{model_name}': host_logits found no '{FINAL_NORM.decode()}' node in its graph")
        rows = np.concatenate(self._captured) if len(self._captured) > 1 else self._captured[0]
        self._captured.clear()
        return rows


def _q8_0_rows(raw: np.ndarray) -> np.ndarray:
    """Q8_0 blocks (a float16 scale, then 32 signed bytes) as float32 values: each a float16 times a small
    integer, exact in float32, so the same numbers as any other dequantiser."""
    blocks = raw.reshape(-1, 34)
    scales = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    values = blocks[:, 2:].view(np.int8).astype(np.float32)
    values *= scales
    return values.reshape(-1)


class _GgufFile:
    """A GGUF file's header through ggml's own reader (Python's gguf package takes seconds on a 262k vocabulary)."""

    def __init__(self, path: Path, model_name: str) -> None:
        self.ggml = _ggml_library()
        self.handle = self.ggml.gguf_init_from_file(str(path).encode(), _InitParams(True, None))
        if not self.handle:
            raise ApplianceError(f"model '{model_name}': ggml could not read the GGUF header of {path}")

    def __enter__(self) -> _GgufFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.ggml.gguf_free(self.handle)

    def string(self, key: str) -> str:
        index = self.ggml.gguf_find_key(self.handle, key.encode())
        return "" if index < 0 else str(self.ggml.gguf_get_val_str(self.handle, index).decode())

    def float(self, key: str) -> float | None:
        index = self.ggml.gguf_find_key(self.handle, key.encode())
        if index < 0 or self.ggml.gguf_get_kv_type(self.handle, index) != _GGUF_FLOAT32:
            return None
        return float(self.ggml.gguf_get_val_f32(self.handle, index))

    def tensor(self, name: str) -> tuple[int, int, int] | None:
        """(ggml type, offset in the file, bytes) of a tensor, or None."""
        index = self.ggml.gguf_find_tensor(self.handle, name.encode())
        if index < 0:
            return None
        offset = self.ggml.gguf_get_data_offset(self.handle) + self.ggml.gguf_get_tensor_offset(self.handle, index)
        return (
            self.ggml.gguf_get_tensor_type(self.handle, index),
            offset,
            self.ggml.gguf_get_tensor_size(self.handle, index),
        )


class OutputMatrix:
    """A model's output matrix in float32 on the host (read from its GGUF once per process).

    A product is split by vocabulary over `workers` threads, each with one BLAS thread: BLAS's own
    threads spin for a while after every product, and on a machine whose cores llama.cpp's threads
    fill that stalled the next `llama_decode` calls (a SmolLM2 decode step took 63 ms, not 26)."""

    def __init__(self, weights: np.ndarray, workers: int = 1) -> None:
        #: shape (vocabulary, width)
        self.weights = weights
        bounds = np.linspace(0, len(weights), max(1, workers) + 1).astype(int)
        self._parts = [(int(start), int(end)) for start, end in pairwise(bounds)]
        self._pool = ThreadPoolExecutor(len(self._parts)) if len(self._parts) > 1 else None
        self._blas = ThreadpoolController()

    @classmethod
    def from_gguf(cls, path: Path, model_name: str, width: int, n_vocab: int, workers: int = 1) -> OutputMatrix:
        """The matrix llama.cpp multiplies the final norm's rows by: `output.weight`, or the token
        embedding where the model ties them. Refused where llama.cpp transforms the product further."""
        with _GgufFile(path, model_name) as gguf:
            architecture = gguf.string("general.architecture")
            for key in _LOGIT_TRANSFORMS:
                value = gguf.float(f"{architecture}.{key}")
                if value not in (None, 0.0, 1.0):
                    raise ApplianceError(f"model '{model_name}': host_logits does not apply {architecture}.{key}")
            found = gguf.tensor("output.weight") or gguf.tensor("token_embd.weight")
        if found is None:
            raise ApplianceError(f"model '{model_name}': host_logits found no output matrix in {path}")
        kind, offset, size = found
        raw = np.fromfile(path, dtype=np.uint8, count=size, offset=offset)
        if kind == _F32:
            weights = raw.view(np.float32)
        elif kind == _F16:
            weights = raw.view(np.float16).astype(np.float32)
        elif kind == _Q8_0:
            weights = _q8_0_rows(raw)
        else:
            raise ApplianceError(
                f"model '{model_name}': host_logits reads F32, F16 or Q8_0 output matrices, not type {kind}"
            )
        if weights.size != n_vocab * width:
            raise ApplianceError(f"model '{model_name}': its output matrix is not {n_vocab} x {width}")
        return cls(np.ascontiguousarray(weights.reshape(n_vocab, width)), workers)

    @property
    def width(self) -> int:
        return int(self.weights.shape[1])

    def logits(self, hidden: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, logits of a run of rows) for all `hidden` rows, at most ROWS_PER_PRODUCT at a time and
        never fewer than two in a product (a lone row is paired with zeros, whose logits are dropped)."""
        total = len(hidden)
        start = 0
        while start < total:
            count = min(ROWS_PER_PRODUCT, total - start)
            if total - start - count == 1:  # leave two for the last product, not one
                count -= 1
            block = hidden[start : start + count]
            if count == 1:
                block = np.concatenate([block, np.zeros_like(block)])
            yield start, self._product(block)[:count]
            start += count

    def _product(self, block: np.ndarray) -> np.ndarray:
        out = np.empty((len(block), len(self.weights)), dtype=np.float32)

        def part(bounds: tuple[int, int]) -> None:
            start, end = bounds
            out[:, start:end] = block @ self.weights[start:end].T

        with self._blas.limit(limits=1, user_api="blas"):
            if self._pool is None:
                part(self._parts[0])
            else:
                list(self._pool.map(part, self._parts))
        return out
