"""Continuous batching over transformers' own cache classes.

Each live sequence keeps its KV cache in a `DynamicCache` of its own (batch
of one). A decode step joins the live sequences' caches, left-padded to the
longest, into one batched `DynamicCache`, runs the model once for one new
token of each, and splits the grown cache back; a padded position is masked
out of attention, so a sequence's numbers do not depend on its neighbours'
lengths. Sequences join (after prefilling their prompt alone) and leave
between steps. A finished conversation's cache is kept under its
conversation key, and its next turn prefills only what follows the longest
common token prefix.

Sampling uses transformers' logits processors with one seeded `torch.Generator`
per sequence, so a sampled reply does not depend on what it was batched with.
A request's GBNF grammar is enforced through xgrammar (vLLM's grammar engine, which
reads the same GBNF): before a token is chosen, the tokens the grammar forbids next
are masked out of that sequence's logits (`GrammarState`).
Attention itself is the model's own (eager, sdpa, ...): nothing here touches it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from appliance.engine.types import ResolvedSampling
from appliance.errors import ApplianceError, first_line


@dataclass
class StoredConversation:
    """A finished turn's cache and the tokens it covers."""

    tokens: list[int]
    cache: Any


@dataclass
class LiveSequence:
    ticket: int
    prompt: list[int]
    sampling: ResolvedSampling
    stops: tuple[str, ...]
    conversation: str | None
    submitted_at: float
    #: the adapter entry this sequence plays (None: the base)
    adapter: str | None = None
    #: a DynamicCache of this sequence alone (prompt and generated tokens fed so far)
    cache: Any = None
    #: prompt tokens served from a stored conversation cache
    cached_tokens: int = 0
    generated: list[int] = field(default_factory=list)
    #: the last sampled token, not yet fed into the cache
    pending: int | None = None
    finish_reason: str | None = None
    generator: Any = None
    processors: Any = None
    #: the request's grammar, followed token by token (None: unconstrained)
    grammar: GrammarState | None = None

    @property
    def cached_length(self) -> int:
        return len(self.prompt) + len(self.generated) - (self.pending is not None)


class ConversationCaches:
    """Finished turns' caches by conversation key, least recently used dropped beyond `capacity`."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._stored: OrderedDict[str, StoredConversation] = OrderedDict()

    def take(self, key: str | None) -> StoredConversation | None:
        """The stored turn of `key`, removed (its cache now belongs to the new turn)."""
        return self._stored.pop(key, None) if key is not None else None

    def keep(self, key: str | None, stored: StoredConversation) -> None:
        if key is None:
            return
        self._stored[key] = stored
        self._stored.move_to_end(key)
        while len(self._stored) > self.capacity:
            self._stored.popitem(last=False)

    def __len__(self) -> int:
        return len(self._stored)


def import_xgrammar() -> Any:
    """xgrammar, or None where it is not installed (it comes with vLLM; `pip install xgrammar` alone)."""
    try:
        import xgrammar
    except ImportError:
        return None
    return xgrammar


class GrammarCompiler:
    """A model's GBNF grammars compiled for its tokenizer through xgrammar (each grammar once: xgrammar
    caches them, and a judge template sends the same grammar with every request)."""

    def __init__(self, xgrammar: Any, tokenizer: Any, vocab_size: int) -> None:
        self.xgrammar = xgrammar
        self.vocab_size = vocab_size
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.compiler = xgrammar.GrammarCompiler(info)

    def follow(self, grammar: str) -> GrammarState:
        """A fresh state of `grammar` for one reply; an invalid grammar is refused in one line."""
        try:
            compiled = self.compiler.compile_grammar(grammar)
        except Exception as error:  # xgrammar raises RuntimeError and others on a grammar it cannot parse
            raise ApplianceError(f"invalid GBNF grammar in a generation request: {first_line(error)}") from None
        return GrammarState(self.xgrammar, compiled, self.vocab_size)


class GrammarState:
    """One reply's place in its grammar: which tokens may come next, and whether it is complete."""

    def __init__(self, xgrammar: Any, compiled: Any, vocab_size: int) -> None:
        self.xgrammar = xgrammar
        self.matcher = xgrammar.GrammarMatcher(compiled)
        self.bitmask = xgrammar.allocate_token_bitmask(1, vocab_size)

    def mask(self, logits: Any) -> Any:
        """A copy of one row of logits with every token the grammar forbids next at -inf."""
        allowed = logits.float().clone()
        self.matcher.fill_next_token_bitmask(self.bitmask)
        self.xgrammar.apply_token_bitmask_inplace(allowed, self.bitmask.to(allowed.device))
        return allowed

    def accept(self, token: int) -> bool:
        """Advance past `token`; whether the grammar is now complete (it took its stop token)."""
        self.matcher.accept_token(token)
        return bool(self.matcher.is_terminated())


def logits_processors(sampling: ResolvedSampling) -> Any:
    """transformers' own processors for a request's sampling settings (the warpers only when sampling)."""
    from transformers.generation import logits_process as lp

    processors = lp.LogitsProcessorList()
    if sampling.repeat_penalty != 1.0:
        processors.append(lp.RepetitionPenaltyLogitsProcessor(sampling.repeat_penalty))
    if sampling.temperature > 0:
        processors.append(lp.TemperatureLogitsWarper(sampling.temperature))
        if sampling.top_k > 0:
            processors.append(lp.TopKLogitsWarper(sampling.top_k))
        if sampling.top_p < 1.0:
            processors.append(lp.TopPLogitsWarper(sampling.top_p))
        if sampling.min_p > 0:
            processors.append(lp.MinPLogitsWarper(sampling.min_p))
    return processors


def choose_token(torch: Any, sequence: LiveSequence, logits: Any) -> int:
    """The next token from one row of logits: greedy at temperature 0, else drawn with the sequence's
    generator; under a grammar, only from the tokens it allows next."""
    if sequence.grammar is not None:
        logits = sequence.grammar.mask(logits)
    if not sequence.processors:  # plain greedy: no token history to build on this hot path
        return int(logits.argmax())
    seen = torch.tensor([sequence.prompt + sequence.generated], device=logits.device)
    scores = sequence.processors(seen, logits.float().unsqueeze(0))
    if sequence.sampling.temperature <= 0:
        return int(scores.argmax(dim=-1))
    probabilities = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probabilities, 1, generator=sequence.generator))


class DecodeBatch:
    """The live sequences' caches joined into one batched `DynamicCache`, kept from step to step.

    Rows are left-padded to the longest and the padding masked out, so each
    sequence's attention sees only its own tokens. While the same sequences
    decode, each step only appends a column; when one leaves, its row is
    dropped in place; only a newcomer makes the batch be joined again. A
    sequence's own cache is cut out of its row when it leaves.
    """

    def __init__(self, torch: Any, new_cache: Callable[[], Any], sequences: list[LiveSequence]) -> None:
        self.torch = torch
        self.new_cache = new_cache
        self.sequences = list(sequences)
        self.cache, self.mask = join_caches(torch, new_cache, [s.cache for s in sequences])
        for sequence in sequences:
            sequence.cache = None  # its keys and values now live in this batch

    def holds(self, sequences: list[LiveSequence]) -> bool:
        return [s.ticket for s in sequences] == [s.ticket for s in self.sequences]

    def grow(self) -> Any:
        """The attention mask for one more token of every row (the cache grows in the forward pass)."""
        ones = self.torch.ones((len(self.sequences), 1), dtype=self.mask.dtype, device=self.mask.device)
        self.mask = self.torch.cat([self.mask, ones], dim=1)
        return self.mask

    def release(self, leaving: list[LiveSequence]) -> None:
        """Give each leaving sequence its own cache back, and drop its row."""
        if not leaving:
            return
        gone = {s.ticket for s in leaving}
        for row, sequence in enumerate(self.sequences):
            if sequence.ticket in gone:
                sequence.cache = self._row_cache(row, sequence.cached_length)
        keep = [row for row, s in enumerate(self.sequences) if s.ticket not in gone]
        self.sequences = [self.sequences[row] for row in keep]
        if keep:
            self.cache.batch_select_indices(self.torch.tensor(keep, device=self.mask.device))
            self.mask = self.mask[keep]

    def dissolve(self) -> None:
        """Every sequence takes its own cache back (before the batch is joined anew)."""
        self.release(list(self.sequences))

    def _row_cache(self, row: int, length: int) -> Any:
        own = self.new_cache()
        for index, layer in enumerate(self.cache.layers):
            start = layer.keys.shape[2] - length
            own.update(
                layer.keys[row : row + 1, :, start:, :].clone(),
                layer.values[row : row + 1, :, start:, :].clone(),
                index,
            )
        return own


def join_caches(torch: Any, dynamic_cache: Callable[[], Any], caches: list[Any]) -> tuple[Any, Any]:
    """One batched cache from single-sequence caches, left-padded to the longest, and its attention
    mask (padding 0)."""
    lengths = [cache.get_seq_length() for cache in caches]
    longest = max(lengths)
    joined = dynamic_cache()
    for index in range(len(caches[0].layers)):
        keys, values = [], []
        for cache, length in zip(caches, lengths, strict=True):
            layer = cache.layers[index]
            pad = longest - length
            keys.append(torch.nn.functional.pad(layer.keys, (0, 0, pad, 0)))
            values.append(torch.nn.functional.pad(layer.values, (0, 0, pad, 0)))
        joined.update(torch.cat(keys), torch.cat(values), index)
    device = caches[0].layers[0].keys.device
    mask = torch.zeros((len(caches), longest), dtype=torch.long, device=device)
    for row, length in enumerate(lengths):
        mask[row, longest - length :] = 1
    return joined, mask
