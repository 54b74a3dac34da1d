"""The backend contract (`engine/types.py`, `engine/backend.py`), run over every backend: one set of
rules, one test each, parametrized by backend, so a backend that silently breaks a rule fails here.

llama.cpp, transformers and vLLM run the embedded SmolLM2; the Ray remote backend reaches a SmolLM2 on
llama.cpp hosted by a worker-group server in a local Ray cluster; the scripted backend (the mock of the
unit tests) measures its context in characters. Each rule is stated on what the caller sees: a prompt that
does not fit is refused as `context_overflow` before anything is decoded, also when it fits but leaves
no room for a reserved reply; a reply never exceeds its token cap; a seeded sampled reply does not
depend on what else is in the batch; and models.toml refuses an option the chosen backend does not read.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from appliance.catalog.models import load_catalog
from appliance.engine.backend import Backend, BackendBase
from appliance.engine.scripted import ScriptedBackend
from appliance.engine.types import GenerationRequest, Message, ResolvedSampling
from appliance.errors import ApplianceError
from tests.fakes import drain

REPO = Path(__file__).resolve().parent.parent
SCRIPTED_CONTEXT = 512


def _has(*modules: str) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in modules)


@dataclass
class Contestant:
    backend: Backend
    #: the context it enforces, in its own tokens (the scripted one's are characters)
    context: int
    close: Callable[[], None]


def _llama_cpp(smollm2_path: Path) -> Contestant:
    from appliance.engine.llama_cpp_backend import LlamaCppBackend

    backend = LlamaCppBackend(smollm2_path, name="contract-llama", context_length=512, slots=4)
    return Contestant(backend, 512, backend.close)


def _transformers(smollm2_path: Path) -> Contestant:
    """Opened from a catalog entry, as a run opens it (its `context_length` is the contract's)."""
    from appliance.catalog.models import ModelSpec
    from appliance.engine.transformers_backend import transformers_backend_for

    spec = ModelSpec(name="contract-hf", backend="transformers", path=str(smollm2_path), context_length=512, slots=4)
    backend = transformers_backend_for(load_catalog(REPO / "models.toml"), spec, slots=4)
    return Contestant(backend, 512, backend.close)


def _vllm(smollm2_path: Path) -> Contestant:
    from appliance.engine.factory import open_backend
    from appliance.offline import enforce_offline

    enforce_offline()
    catalog = load_catalog(REPO / "models.toml")
    spec = catalog.get("smollm2-135m-vllm")
    backend = open_backend(catalog, spec, parallel=4)
    return Contestant(backend, spec.context_length, backend.close)


def _ray_remote(smollm2_path: Path) -> Contestant:
    """SmolLM2 (llama.cpp, 512-token context) in a worker-group server of a local Ray cluster."""
    import ray

    from appliance.cluster.worker_groups import ModelServer, RemoteBackend
    from appliance.engine.factory import open_backend

    catalog = load_catalog(REPO / "models.toml")
    small = catalog.get("smollm2-135m").model_copy(update={"context_length": 512, "slots": 4})
    catalog = catalog.model_copy(update={"models": {**catalog.models, small.name: small}})
    ray.init(num_cpus=1, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    actor = ray.remote(ModelServer).options(num_cpus=1)
    server: Any = actor.remote("contract", catalog, [small.name], 4, open_backend, 1)
    ray.get(server.pid.remote())  # its model is loaded

    def close() -> None:
        ray.get(server.close.remote())
        ray.shutdown()

    return Contestant(RemoteBackend(small.name, server), 512, close)


def _scripted(smollm2_path: Path) -> Contestant:
    def respond(request: GenerationRequest) -> str:
        return f"reply {request.sampling.seed}"

    backend = ScriptedBackend("contract-scripted", respond, context_chars=SCRIPTED_CONTEXT)
    return Contestant(backend, SCRIPTED_CONTEXT, backend.close)


OPENERS: dict[str, Callable[[Path], Contestant]] = {
    "llama_cpp": _llama_cpp,
    "transformers": _transformers,
    "vllm": _vllm,
    "ray_remote": _ray_remote,
    "scripted": _scripted,
}
NEEDS = {"transformers": ("torch", "transformers"), "vllm": ("vllm",), "ray_remote": ("ray",)}


@pytest.fixture(scope="module", params=sorted(OPENERS))
def contestant(request: pytest.FixtureRequest, smollm2_path: Path) -> Iterator[Contestant]:
    name = str(request.param)
    missing = [module for module in NEEDS.get(name, ()) if not _has(module)]
    if missing:
        pytest.skip(f"{name}: {', '.join(missing)} not installed (make test installs it)")
    opened = OPENERS[name](smollm2_path)
    yield opened
    opened.close()


def _asked(text: str, *, max_tokens: int = 8, temperature: float = 0.0, seed: int = 0, reserve: bool = False,
           ignore_eos: bool = False) -> GenerationRequest:  # fmt: skip
    return GenerationRequest(
        messages=(Message(role="user", content=text),),
        sampling=ResolvedSampling(temperature=temperature, max_tokens=max_tokens, seed=seed, ignore_eos=ignore_eos),
        reserve_output=reserve,
    )


def _words(backend: Backend, tokens: int) -> str:
    """A text of about `tokens` tokens of this backend's tokenizer."""
    per_word = max(1, backend.count_tokens(" apple" * 20) // 20)
    return "apple " * (tokens // per_word)


def test_tickets_are_distinct_and_every_request_is_counted(contestant: Contestant) -> None:
    """The plumbing every backend shares (`BackendBase`): one ticket per request, each answered once."""
    backend = contestant.backend
    assert isinstance(backend, BackendBase)
    before = backend.counters.requests
    tickets = [backend.submit(_asked(f"Say {word}.", max_tokens=2)) for word in ("yes", "no", "maybe")]
    answered: list[int] = []
    while backend.busy:
        answered += [ticket for ticket, _ in backend.step()]
    assert len(set(tickets)) == 3 and sorted(answered) == sorted(tickets)
    assert backend.counters.requests == before + 3


def test_a_prompt_longer_than_the_context_is_refused_before_decoding(contestant: Contestant) -> None:
    backend, context = contestant.backend, contestant.context
    (refused,) = drain(backend, [_asked(_words(backend, context + 64))])
    assert refused.finish_reason == "context_overflow" and refused.completion_tokens == 0 and refused.text == ""
    assert refused.error is not None and f"does not fit the context of {context} tokens" in refused.error
    assert refused.prompt_tokens > context


def test_a_reserved_reply_that_does_not_fit_is_refused_and_an_unreserved_one_is_not(contestant: Contestant) -> None:
    backend, context = contestant.backend, contestant.context
    prompt = _words(backend, context // 2)
    reserved, plain = drain(backend, [_asked(prompt, max_tokens=context, reserve=True), _asked(prompt, max_tokens=4)])
    assert reserved.finish_reason == "context_overflow" and reserved.completion_tokens == 0
    assert reserved.error is not None and f"and {context} for the reply" in reserved.error
    assert plain.finish_reason in ("stop", "length") and plain.error is None


def test_a_reply_never_exceeds_its_token_cap(contestant: Contestant) -> None:
    replies = drain(
        contestant.backend, [_asked("Count from one to fifty.", max_tokens=3, ignore_eos=True, temperature=0.8)]
    )
    assert all(reply.completion_tokens <= 3 for reply in replies)
    assert all(reply.finish_reason == "length" for reply in replies if reply.completion_tokens == 3)


def test_a_stop_string_ends_the_reply_and_is_not_in_it(contestant: Contestant) -> None:
    """The greedy reply without a stop string, then with two of its middle characters as one: the same
    reply, cut where that string first occurs, with finish reason `stop`."""
    backend = contestant.backend
    question = "List the numbers from one to twenty, separated by commas."
    (free,) = drain(backend, [_asked(question, max_tokens=24)])
    assert len(free.text.strip()) >= 6, free.text
    middle = len(free.text) // 2
    stop = free.text[middle : middle + 2]
    sampling = ResolvedSampling(temperature=0.0, max_tokens=24, seed=0, stop=(stop,))
    (stopped,) = drain(backend, [_asked(question, max_tokens=24).model_copy(update={"sampling": sampling})])
    assert stop not in stopped.text and stopped.finish_reason == "stop", (stop, stopped.text)
    assert stopped.text.rstrip() == free.text[: free.text.find(stop)].rstrip(), (stop, free.text, stopped.text)


def test_a_seeded_sampled_reply_does_not_depend_on_the_batch(contestant: Contestant) -> None:
    backend = contestant.backend
    sampled = _asked("Name three colours.", max_tokens=10, temperature=1.0, seed=1234)
    (alone,) = drain(backend, [sampled])
    others = [_asked(f"Say a word about {topic}.", max_tokens=10, temperature=1.0, seed=7) for topic in ("cats", "sea")]
    together = drain(backend, [others[0], sampled, others[1]])
    assert together[1].text == alone.text and together[1].finish_reason == alone.finish_reason


OPTIONS_NOT_READ = {
    "llama_cpp": ('device = "cpu"', "device"),
    "transformers": ("exact_kv = true", "exact_kv"),
    "vllm": ("flash_attention = true", "flash_attention"),
}


@pytest.mark.parametrize("backend_name", sorted(OPTIONS_NOT_READ))
def test_an_option_the_backend_does_not_read_is_refused_naming_it(tmp_path: Path, backend_name: str) -> None:
    """Set even to its default, an option another backend reads is an error, not silently ignored."""
    line, option = OPTIONS_NOT_READ[backend_name]
    models = tmp_path / "models.toml"
    models.write_text(f'[models.m]\nbackend = "{backend_name}"\npath = "m.gguf"\n{line}\n', encoding="utf-8")
    with pytest.raises(ApplianceError, match=rf"field '{option}'.* applies to backend .*not '{backend_name}'"):
        load_catalog(models)
    for kv_option in ("exact_kv = true", "kv_budget_mb = 64"):  # read by llama.cpp: accepted there
        models.write_text(f'[models.m]\nbackend = "llama_cpp"\npath = "m.gguf"\n{kv_option}\n', encoding="utf-8")
        assert load_catalog(models).get("m").backend == "llama_cpp"
