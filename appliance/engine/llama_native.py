"""Thin, typed wrappers over llama.cpp's C API (through llama-cpp-python's ctypes bindings).

Only the low-level API is used: the high-level `Llama` class decodes one
sequence at a time, and batching many sequences is the point of the engine.
"""

from __future__ import annotations

import ctypes
import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp as C
import numpy as np

from appliance.engine.types import Message, ResolvedSampling
from appliance.errors import ApplianceError

_GGUF_MAGIC = b"GGUF"
#: `gpu_layers = -1`: more layers than any model has, so llama.cpp offloads them all
ALL_LAYERS = 1 << 20
_initialised = False
#: llama.cpp's last log lines: a failed load says why only there
_recent_log: deque[str] = deque(maxlen=16)
#: models loaded in this process, by (file, GPU layers): adapters over one base share its weights
_shared_models: dict[tuple[str, int | None], LlamaModel] = {}


@C.llama_log_callback  # type: ignore[untyped-decorator]
def _quiet_log(level: int, text: bytes, user_data: Any) -> None:
    """llama.cpp logs every tensor it loads; the appliance reports what matters itself."""
    _recent_log.append(text.decode("utf-8", errors="replace"))
    if os.environ.get("APPLIANCE_LLAMA_LOG"):
        os.write(2, text)


def last_log_error() -> str:
    """llama.cpp's most recent complaint (an exception it caught is logged as `...: <what>`)."""
    lines = [line.strip() for line in "".join(_recent_log).splitlines() if line.strip()]
    failures = [line for line in lines if "failed" in line or "error" in line or "incorrect" in line]
    return (failures or lines or ["no reason logged"])[-1]


def default_threads() -> int:
    """The cores this process may run on (a `taskset` or cpuset limit counts, unlike `os.cpu_count()`):
    llama.cpp's threads spin at their barriers, so more threads than cores stall each other."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def init_backend() -> None:
    global _initialised
    if not _initialised:
        C.llama_log_set(_quiet_log, ctypes.c_void_p())
        C.llama_backend_init()
        _initialised = True


def check_gguf_file(path: Path, model_name: str) -> None:
    """Fail with a clear message before llama.cpp gets a file it would reject obscurely."""
    if not path.is_file():
        raise ApplianceError(f"model '{model_name}': file not found: {path}")
    with path.open("rb") as handle:
        if handle.read(4) != _GGUF_MAGIC:
            raise ApplianceError(f"model '{model_name}': {path} is not a GGUF file (bad magic bytes)")


class LlamaModel:
    """A loaded GGUF model and its vocabulary."""

    def __init__(self, path: Path, name: str, gpu_layers: int | None = None) -> None:
        init_backend()
        check_gguf_file(path, name)
        params = C.llama_model_default_params()
        if gpu_layers:
            if not C.llama_supports_gpu_offload():
                raise ApplianceError(
                    f"model '{name}': 'gpu_layers' is set but this llama-cpp-python build cannot offload to a GPU "
                    "(reinstall it with CMAKE_ARGS=-DGGML_CUDA=on; see README)"
                )
            params.n_gpu_layers = ALL_LAYERS if gpu_layers < 0 else gpu_layers
        self.handle = C.llama_model_load_from_file(str(path).encode(), params)
        if not self.handle:
            raise ApplianceError(f"model '{name}': llama.cpp could not load {path} (corrupt or unsupported)")
        self.path = path
        self.name = name
        self.vocab = C.llama_model_get_vocab(self.handle)
        self.n_vocab = int(C.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = int(C.llama_model_n_ctx_train(self.handle))
        self.add_bos = bool(C.llama_vocab_get_add_bos(self.vocab))
        #: positions a sliding-window layer attends (Gemma 3: 512); 0 when every layer sees everything
        self.sliding_window = int(C.llama_model_n_swa(self.handle))
        template = C.llama_model_chat_template(self.handle, None)
        self.chat_template: bytes | None = template if template else None
        self._jinja_template: Any = None
        #: backends using this model (see `shared`): the weights are freed when the last one closes
        self.users = 1
        self._adapters: dict[str, Any] = {}

    @classmethod
    def shared(cls, path: Path, name: str, gpu_layers: int | None = None) -> LlamaModel:
        """The model of `path`, loaded once per process: a base and its adapters hold one copy."""
        key = (str(path.resolve()), gpu_layers)
        model = _shared_models.get(key)
        if model is not None and model.handle:
            model.users += 1
            return model
        model = cls(path, name, gpu_layers)
        _shared_models[key] = model
        return model

    def adapter(self, path: Path, model_name: str) -> Any:
        """A GGUF LoRA loaded against these weights (once per file; llama.cpp frees it with the model)."""
        key = str(path.resolve())
        if key not in self._adapters:
            check_gguf_file(path, model_name)
            _recent_log.clear()
            handle = C.llama_adapter_lora_init(self.handle, str(path).encode())
            if not handle:
                raise ApplianceError(
                    f"model '{model_name}': adapter {path} does not load on base {self.path.name}: {last_log_error()}"
                )
            self._adapters[key] = handle
        return self._adapters[key]

    def metadata(self, key: str) -> str | None:
        buffer = ctypes.create_string_buffer(256)
        written = C.llama_model_meta_val_str(self.handle, key.encode(), buffer, 256)
        return buffer.value.decode() if written >= 0 else None

    def kv_bytes_per_token(self) -> int:
        """f16 K and V of one token over all layers (an upper bound for sliding-window models)."""
        architecture = self.metadata("general.architecture") or ""
        head_dim = int(C.llama_model_n_embd(self.handle)) // max(1, int(C.llama_model_n_head(self.handle)))
        key_dim = int(self.metadata(f"{architecture}.attention.key_length") or head_dim)
        value_dim = int(self.metadata(f"{architecture}.attention.value_length") or head_dim)
        heads = int(C.llama_model_n_head_kv(self.handle))
        return int(C.llama_model_n_layer(self.handle)) * heads * (key_dim + value_dim) * 2

    def close(self) -> None:
        self.users -= 1
        if self.users > 0 or not self.handle:
            return
        for key, model in list(_shared_models.items()):
            if model is self:
                del _shared_models[key]
        self._adapters.clear()
        C.llama_model_free(self.handle)
        self.handle = None

    def tokenize(self, text: str, *, parse_special: bool, add_bos: bool | None = None) -> list[int]:
        """`add_bos`: None follows the model (a prompt); False for text that continues a prompt."""
        data = text.encode("utf-8")
        bos = self.add_bos if add_bos is None else add_bos
        capacity = len(data) + 8
        buffer = (C.llama_token * capacity)()
        count = C.llama_tokenize(self.vocab, data, len(data), buffer, capacity, bos, parse_special)
        if count < 0:
            capacity = -count
            buffer = (C.llama_token * capacity)()
            count = C.llama_tokenize(self.vocab, data, len(data), buffer, capacity, bos, parse_special)
        return list(buffer[:count])

    def logits_row(self, context: Any, index: int) -> np.ndarray:
        """The logits llama.cpp computed for batch entry `index` of the last decode (a copy)."""
        return logits_view(context, index, self.n_vocab).copy()

    def logits_view(self, context: Any, index: int) -> np.ndarray:
        """The same row in llama.cpp's own buffer, without a copy: valid until the next decode."""
        return logits_view(context, index, self.n_vocab)

    def piece(self, token: int) -> bytes:
        """The bytes of one generated token (control tokens render as nothing)."""
        buffer = ctypes.create_string_buffer(64)
        size = C.llama_token_to_piece(self.vocab, token, buffer, 64, 0, False)
        if size < 0:
            buffer = ctypes.create_string_buffer(-size)
            size = C.llama_token_to_piece(self.vocab, token, buffer, -size, 0, False)
        return buffer.raw[:size]

    def is_end_of_generation(self, token: int) -> bool:
        return bool(C.llama_vocab_is_eog(self.vocab, token))

    def special_piece(self, token: int) -> str:
        buffer = ctypes.create_string_buffer(64)
        size = C.llama_token_to_piece(self.vocab, token, buffer, 64, 0, True)
        return buffer.raw[: max(size, 0)].decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: Sequence[Message]) -> str:
        """Render the GGUF's Jinja chat template, as transformers would.

        llama.cpp's built-in engine only recognises known template families and can
        differ in details (SmolLM2's template adds a default system message; the
        built-in ChatML does not), so it is the fallback, not the default.
        """
        if self.chat_template is None:
            raise ApplianceError(f"model '{self.name}': its GGUF has no chat template (use chat_format = \"plain\")")
        try:
            return self._render_jinja(messages)
        except Exception:  # templates use features a sandbox may refuse; llama.cpp knows the common ones
            return self._render_builtin(messages)

    def _render_jinja(self, messages: Sequence[Message]) -> str:
        if self._jinja_template is None:
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            assert self.chat_template is not None
            self._jinja_template = environment.from_string(self.chat_template.decode("utf-8"))
        return str(
            self._jinja_template.render(
                messages=[{"role": m.role, "content": m.content} for m in messages],
                add_generation_prompt=True,
                bos_token=self.special_piece(C.llama_vocab_bos(self.vocab)),
                eos_token=self.special_piece(C.llama_vocab_eos(self.vocab)),
            )
        )

    def _render_builtin(self, messages: Sequence[Message]) -> str:
        assert self.chat_template is not None
        keep_alive = [(m.role.encode(), m.content.encode("utf-8")) for m in messages]
        chat = (C.llama_chat_message * len(messages))()
        for index, (role, content) in enumerate(keep_alive):
            chat[index].role = role
            chat[index].content = content
        size = sum(len(content) for _, content in keep_alive) * 2 + 512
        for _ in range(2):
            buffer = ctypes.create_string_buffer(size)
            written = C.llama_chat_apply_template(self.chat_template, chat, len(messages), True, buffer, size)
            if written < 0:
                raise ApplianceError(f"model '{self.name}': llama.cpp does not recognise its chat template")
            if written <= size:
                return buffer.raw[:written].decode("utf-8")
            size = written
        raise RuntimeError("chat template output kept growing")


def gguf_adapter_file(adapter: Path, name: str) -> Path:
    """The GGUF LoRA of an adapter entry: the file, or the one `.gguf` in its folder."""
    if adapter.is_file():
        return adapter
    if not adapter.is_dir():
        raise ApplianceError(f"model '{name}': field 'adapter': {adapter} not found")
    found = sorted(adapter.glob("*.gguf"))
    if len(found) != 1:
        what = "no GGUF LoRA" if not found else f"{len(found)} GGUF files"
        raise ApplianceError(
            f"model '{name}': field 'adapter': {adapter} holds {what}; llama_cpp needs exactly one "
            "(`appliance adapter to-gguf` converts a PEFT folder)"
        )
    return found[0]


def new_context(
    model: LlamaModel,
    name: str,
    *,
    sequences: int,
    context_length: int,
    batch_tokens: int,
    threads: int,
    kv_unified: bool,
    flash_attention: bool,
) -> Any:
    """A llama.cpp context of `sequences` sequences of `context_length` cells each."""
    params = C.llama_context_default_params()
    params.n_ctx = context_length * sequences
    params.n_batch = params.n_ubatch = batch_tokens
    params.n_seq_max = sequences
    # Default: one KV stream per sequence, so attention only spans a sequence's own cells and its layout
    # is the same as when decoded alone (docs/engine.md, "What the engine guarantees").
    params.kv_unified = kv_unified
    # ggml's CPU flash-attention kernel gives results that depend on how a prompt is split into batches;
    # exact mode's planned chunks make it exact too (bench_results/notes/engine-exactness.md).
    params.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attention else C.LLAMA_FLASH_ATTN_TYPE_DISABLED
    params.n_threads = params.n_threads_batch = threads
    params.no_perf = True
    context = C.llama_init_from_model(model.handle, params)
    if not context:
        raise ApplianceError(f"model '{name}': llama.cpp could not create a context of {params.n_ctx} tokens")
    return context


def read_sequence_state(context: Any, seq_id: int) -> tuple[Any, int]:
    """Sequence `seq_id`'s KV and cell records as llama.cpp serialises them: a byte array and its length."""
    size = int(C.llama_state_seq_get_size(context, seq_id))
    data = (ctypes.c_uint8 * size)()
    return data, int(C.llama_state_seq_get_data(context, data, size, seq_id))


def copy_sequence(context: Any, source: int, destination: int, *, unified: bool, whole_stream: bool) -> None:
    """Make sequence `destination`'s KV a copy of `source`'s.

    In one KV stream (`unified`) llama.cpp's `seq_cp` only tags cells, at once. Across streams it
    queues a copy of the whole stream buffer for the next `llama_decode` (`whole_stream`); a state
    read or write of either sequence before then would see, or be overwritten by, the other's old
    data, so the caller must run a decode first (`SlotCaches.flush_copies`). Otherwise the used
    cells are copied through host memory at once; that copy leaves out the positions a sliding
    window already masks (see `chunk_plan.window_reuse`), so sliding-window models take the stream
    copy.
    """
    if unified or whole_stream:
        C.llama_memory_seq_cp(C.llama_get_memory(context), source, destination, -1, -1)
        return
    data, written = read_sequence_state(context, source)
    if int(C.llama_state_seq_set_data(context, data, written, destination)) != written:
        raise RuntimeError(f"llama.cpp could not copy sequence {source} to {destination}: {last_log_error()}")


def sequence_floor(memory: Any, seq_id: int) -> int:
    """The lowest position whose KV the sequence holds in every layer (0 when empty): above 0 only
    where sliding-window layers lost positions the window masks (a serialised copy, an overwrite)."""
    return max(0, int(C.llama_memory_seq_pos_min(memory, seq_id)))


def apply_adapter(context: Any, adapter: Any, scale: float) -> None:
    """Put one LoRA on a context at `scale` (llama.cpp sets adapters per context, not per sequence)."""
    handles = (C.llama_adapter_lora_p_ctypes * 1)(adapter)
    scales = (ctypes.c_float * 1)(scale)
    if C.llama_set_adapters_lora(context, handles, 1, scales) != 0:
        raise ApplianceError(f"llama.cpp refused the adapter on its context: {last_log_error()}")


def build_sampler_chain(model: LlamaModel, sampling: ResolvedSampling) -> Any:
    """One sequence's sampler chain (penalties, truncation, temperature, selection), run in C."""
    chain = C.llama_sampler_chain_init(C.llama_sampler_chain_default_params())
    if sampling.repeat_penalty != 1.0:
        C.llama_sampler_chain_add(
            chain, C.llama_sampler_init_penalties(model.n_vocab, 64, sampling.repeat_penalty, 0.0, 0.0)
        )
    if sampling.temperature <= 0.0:
        C.llama_sampler_chain_add(chain, C.llama_sampler_init_greedy())
        return chain
    if sampling.top_k > 0:
        C.llama_sampler_chain_add(chain, C.llama_sampler_init_top_k(sampling.top_k))
    if sampling.top_p < 1.0:
        C.llama_sampler_chain_add(chain, C.llama_sampler_init_top_p(sampling.top_p, 1))
    if sampling.min_p > 0.0:
        C.llama_sampler_chain_add(chain, C.llama_sampler_init_min_p(sampling.min_p, 1))
    C.llama_sampler_chain_add(chain, C.llama_sampler_init_temp(sampling.temperature))
    C.llama_sampler_chain_add(chain, C.llama_sampler_init_dist(sampling.seed & 0xFFFFFFFF))
    return chain


def greedy_token(context: Any, index: int, n_vocab: int) -> int:
    """The best token of batch entry `index`'s logits (the first of equals, as llama.cpp's greedy sampler).

    llama.cpp's own sampler first fills a 12-byte candidate record per vocabulary entry; with a
    128k vocabulary that is about 0.5 ms a row, which held a GPU's decode steps to host speed.
    """
    return int(logits_view(context, index, n_vocab).argmax())


def logits_view(context: Any, index: int, n_vocab: int) -> np.ndarray:
    """Batch entry `index`'s logits in llama.cpp's own buffer: valid until the next decode."""
    return np.ctypeslib.as_array(C.llama_get_logits_ith(context, index), shape=(n_vocab,))


#: llama.cpp's `llama_token_data` (id, logit, p) as a numpy record, so candidate arrays are filled in bulk
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)


class TokenSampler:
    """One sequence's sampler.

    Plain greedy is one argmax (`greedy_token`). Otherwise, without a grammar, llama.cpp's chain runs in
    C (`llama_sampler_sample`). With one, a pass of the
    grammar over the whole vocabulary (262k tokens for Gemma) costs more than the decode step, so by
    default the token is sampled without it and only checked: one candidate through the grammar.
    Only when the grammar rejects it is the token sampled again with the grammar applied first (as
    llama.cpp's own common sampler does). At temperature 0 the tokens are those of grammar-first
    sampling (the best legal token is the best token whenever the best token is legal); at higher
    temperatures a kept token is legal and a rejected one is redrawn from the legal tokens, which
    differs from grammar-first sampling only in what top-k/top-p/min-p cut before the draw.
    """

    def __init__(self, model: LlamaModel, sampling: ResolvedSampling, grammar: str | None, *, lazy: bool = True):
        self.chain = build_sampler_chain(model, sampling)
        self.grammar: Any = None
        self.lazy = lazy
        self.rejections = 0
        self.n_vocab = model.n_vocab
        #: plain greedy selection (no penalty, no grammar) is one argmax, outside the chain
        self.argmax = sampling.temperature <= 0.0 and sampling.repeat_penalty == 1.0 and grammar is None
        if grammar is not None:
            self.grammar = C.llama_sampler_init_grammar(model.vocab, grammar.encode(), b"root")
            if not self.grammar:
                C.llama_sampler_free(self.chain)
                raise ApplianceError("invalid GBNF grammar in a generation request")
            self._ids = np.arange(self.n_vocab, dtype=np.int32)
            self._one = np.zeros(1, dtype=_TOKEN_DATA)

    def sample(self, context: Any, index: int) -> int:
        """The next token from the logits of batch entry `index`, accepted into the sampler's state."""
        if self.argmax:
            return greedy_token(context, index, self.n_vocab)
        if self.grammar is None:
            return int(C.llama_sampler_sample(self.chain, context, index))
        logits = logits_view(context, index, self.n_vocab)
        token = self._select(logits, constrained=False) if self.lazy else -1
        if token < 0 or not self._legal(token):
            self.rejections += token >= 0
            token = self._select(logits, constrained=True)
        C.llama_sampler_accept(self.grammar, token)
        C.llama_sampler_accept(self.chain, token)
        return token

    def _select(self, logits: np.ndarray, *, constrained: bool) -> int:
        candidates = np.empty(self.n_vocab, dtype=_TOKEN_DATA)
        candidates["id"], candidates["logit"], candidates["p"] = self._ids, logits, 0.0
        array = C.llama_token_data_array(
            data=candidates.ctypes.data_as(C.llama_token_data_p), size=self.n_vocab, selected=-1, sorted=False
        )
        if constrained:
            C.llama_sampler_apply(self.grammar, ctypes.byref(array))
        C.llama_sampler_apply(self.chain, ctypes.byref(array))
        return int(array.data[array.selected].id)

    def _legal(self, token: int) -> bool:
        """Whether the grammar allows `token` next (it sets a forbidden candidate's logit to -inf)."""
        self._one["id"], self._one["logit"], self._one["p"] = token, 0.0, 0.0
        array = C.llama_token_data_array(
            data=self._one.ctypes.data_as(C.llama_token_data_p), size=1, selected=-1, sorted=False
        )
        C.llama_sampler_apply(self.grammar, ctypes.byref(array))
        return bool(np.isfinite(self._one["logit"][0]))

    def free(self) -> None:
        C.llama_sampler_free(self.chain)
        if self.grammar is not None:
            C.llama_sampler_free(self.grammar)


class TokenBatch:
    """A reusable `llama_batch`: tokens of many sequences, one `llama_decode` call."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.raw = C.llama_batch_init(capacity, 0, 1)

    def clear(self) -> None:
        self.raw.n_tokens = 0

    def add(self, token: int, position: int, seq_id: int, wants_logits: bool) -> int:
        """Append one token; returns its index, which `llama_sampler_sample` takes."""
        index = int(self.raw.n_tokens)
        self.raw.token[index] = token
        self.raw.pos[index] = position
        self.raw.n_seq_id[index] = 1
        self.raw.seq_id[index][0] = seq_id
        self.raw.logits[index] = 1 if wants_logits else 0
        self.raw.n_tokens = index + 1
        return index

    def __len__(self) -> int:
        return int(self.raw.n_tokens)

    def close(self) -> None:
        C.llama_batch_free(self.raw)
