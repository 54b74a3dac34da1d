"""The test suite's mock model: a typed scripted backend and a backend factory for runs.

`scripted_factory(reply)` opens one `ScriptedBackend` per model; `reply(model, request)`
answers each request. The default reply fits any grammar the appliance sends
(the shortest string its GBNF accepts) and answers free text with a fixed
sentence, so every family can run end to end without a real model.
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import duckdb

from appliance.catalog.models import Catalog, ModelSpec, load_catalog
from appliance.catalog.panels import Panel
from appliance.engine.backend import Backend
from appliance.engine.scripted import Scorer, ScriptedBackend
from appliance.engine.types import Completion, GenerationRequest
from appliance.episodes.pool import ModelPool
from appliance.episodes.scheduler import Scheduler
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import load_family
from appliance.scenarios.base import RULE_SCORER
from appliance.store import EpisodeRecord, MessageRecord, RunRecord, ScoreRecord, Store
from appliance.store.journal import journal_folder, run_stream

#: (model name, request) -> the reply text
Reply = Callable[[str, GenerationRequest], str]
FREE_TEXT = "A plain answer."


REPO = Path(__file__).resolve().parent.parent


def role_of(request: GenerationRequest) -> str:
    """The role a request was made for: conversation keys are `episode/role-or-conversation/target`."""
    parts = conversation_of(request).split("/")
    return parts[-2] if len(parts) >= 3 else ""


def conversation_of(request: GenerationRequest) -> str:
    """The request's conversation key (`episode/role-or-conversation/target`); every episode request has one."""
    assert request.conversation_key is not None, "an episode request without a conversation key"
    return request.conversation_key


def one(connection: Any, sql: str) -> tuple[Any, ...]:
    """The single row a query must return (test assertions read the store directly)."""
    row = connection.execute(sql).fetchone()
    assert row is not None, f"no row for: {sql}"
    return tuple(row)


# -- hand-made runs: reports checked against figures computed by hand ----------

HAND_TIME = datetime(2026, 1, 1)


def hand_episode(
    run_id: str,
    scenario: str,
    instance_id: str,
    player: str,
    *,
    scores: Mapping[str, float | None] | None = None,
    panel: str = RULE_SCORER,
    metadata: dict[str, Any] | None = None,
    messages: Sequence[tuple[str, str]] = (),
    error: str | None = None,
) -> EpisodeRecord:
    """An episode as a family would store it; `error` makes it a failed one, `messages` are (speaker, text)."""
    return EpisodeRecord(
        episode_id=f"{run_id}:{instance_id}:{player}",
        run_id=run_id,
        scenario=scenario,
        instance_id=instance_id,
        player=player,
        status="finished" if error is None else "error",
        seed=0,
        started_at=HAND_TIME,
        finished_at=HAND_TIME,
        wall_s=0.0,
        error=error,
        metadata=metadata or {},
        messages=[
            MessageRecord(
                idx=idx,
                speaker=speaker,
                model=player,
                text=text,
                prompt_tokens=0,
                cached_prompt_tokens=0,
                completion_tokens=0,
                latency_s=0.0,
                finish_reason="stop",
            )
            for idx, (speaker, text) in enumerate(messages)
        ],
        scores=[ScoreRecord(panel=panel, player=player, metric=m, value=v) for m, v in (scores or {}).items()],
    )


def store_hand_run(store: Store, run_id: str, config: dict[str, Any], episodes: list[EpisodeRecord]) -> None:
    store.import_run(
        RunRecord(
            run_id=run_id,
            started_at=HAND_TIME,
            seed=0,
            config=config,
            versions={},
            git_revision=None,
            file_hashes={},
        ),
        [],
        episodes,
    )


def default_reply(model: str, request: GenerationRequest) -> str:
    return shortest_match(request.grammar) if request.grammar else FREE_TEXT


@dataclass
class ScriptedFactory:
    """A `BackendFactory` that records the backends it opened, by model name."""

    reply: Reply = default_reply
    opened: dict[str, ScriptedBackend] = field(default_factory=dict)
    #: answers scoring requests (default: the scripted backend's own `scripted_scores`)
    scorer: Scorer | None = None

    def __call__(self, catalog: Catalog, spec: ModelSpec, *, parallel: int) -> Backend:
        name = spec.name
        self.opened[name] = ScriptedBackend(name, lambda request: self.reply(name, request), scorer=self.scorer)
        return self.opened[name]


def seed_echo(model: str, request: GenerationRequest) -> str:
    """Free text that names the request's seed: transcripts then differ wherever seeds differ."""
    if request.grammar:
        return shortest_match(request.grammar)
    return f"{FREE_TEXT} (seed {request.sampling.seed})"


def scripted_factory(reply: Reply = default_reply, scorer: Scorer | None = None) -> ScriptedFactory:
    return ScriptedFactory(reply, scorer=scorer)


# -- the shortest string a GBNF grammar accepts -----------------------------

_TOKEN = re.compile(
    r'\s*(?:(?P<literal>"(?:\\.|[^"\\])*")|(?P<cls>\[(?:\\.|[^\]\\])*\])|(?P<name>[A-Za-z_][\w-]*)'
    r"|(?P<count>\{\d+(?:,\d*)?\})|(?P<op>[|()*+?]))"
)


def shortest_match(grammar: str) -> str:
    """Generate from `root` taking the first alternative and the fewest repetitions.

    Enough of GBNF for the grammars the appliance writes: literals, character
    classes (negated ones too), rule references, groups, alternatives and
    the repetitions `*`, `+`, `?` and `{m,n}`.
    """
    rules: dict[str, str] = {}
    for line in grammar.splitlines():
        if "::=" in line:
            name, _, body = line.partition("::=")
            rules[name.strip()] = body.strip()
    return _expand(rules["root"], rules, depth=0)


def _expand(body: str, rules: dict[str, str], depth: int) -> str:
    if depth > 50:
        raise ValueError("grammar recursion too deep for the mock model")
    tokens = [match for match in _TOKEN.finditer(body) if match.group(0).strip()]
    alternative = _first_alternative(tokens)
    out: list[str] = []
    index = 0
    while index < len(alternative):
        token = alternative[index]
        if token.group("op") == "(":
            end = _closing(alternative, index)
            piece = _expand(" ".join(t.group(0) for t in alternative[index + 1 : end]), rules, depth + 1)
            index = end
        elif token.group("literal"):
            piece = _unescape(token.group("literal")[1:-1])
        elif token.group("cls"):
            piece = _class_member(token.group("cls")[1:-1])
        elif token.group("name"):
            piece = _expand(rules[token.group("name")], rules, depth + 1)
        else:
            piece = ""
        following = alternative[index + 1] if index + 1 < len(alternative) else None
        out.append(piece * _repetitions(following))
        if following is not None and (following.group("count") or following.group("op") in ("*", "+", "?")):
            index += 1
        index += 1
    return "".join(out)


def _first_alternative(tokens: list[re.Match[str]]) -> list[re.Match[str]]:
    depth = 0
    for index, token in enumerate(tokens):
        op = token.group("op")
        depth += op == "("
        depth -= op == ")"
        if op == "|" and depth == 0:
            return tokens[:index]
    return tokens


def _closing(tokens: list[re.Match[str]], start: int) -> int:
    depth = 0
    for index in range(start, len(tokens)):
        depth += tokens[index].group("op") == "("
        depth -= tokens[index].group("op") == ")"
        if depth == 0:
            return index
    raise ValueError("unbalanced parentheses in grammar")


def _repetitions(token: re.Match[str] | None) -> int:
    if token is None:
        return 1
    if token.group("count"):
        return int(token.group("count")[1:-1].split(",")[0])
    return {"*": 0, "?": 0, "+": 1}.get(token.group("op") or "", 1)


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), text)


def _class_member(spec: str) -> str:
    """A character of a class: its first member, or for a negated class a letter it does not exclude."""
    if spec.startswith("^"):
        excluded = _unescape(spec[1:])
        return next(c for c in "xyzab" if c not in excluded)
    first = _unescape(spec)[0]
    return first


def _judge_by_reply(player_reply: str) -> Reply:
    """The player says `player_reply`; judges give 4 to good replies and 2 to bad ones, on every criterion."""

    def reply(model: str, request: GenerationRequest) -> str:
        text = "\n".join(m.content for m in request.messages)
        if request.grammar is not None and "turns" in request.grammar:
            replies = re.findall(r"^\[\d+\] [^:]+: (.*)$", text, flags=re.MULTILINE)
            score = 4 if all("good" in r for r in replies) else 2
            turn = {"in_character": score, "entertaining": score, "fluent": score, "refusal": False}
            return json.dumps({"reasoning": "", "turns": [turn] * len(replies)})
        return "Tell me more." if role_of(request) == "interrogator" else player_reply

    return reply


def scripted_pingpong_run(db: Path, reply: str, judges: list[str], *, limit: int = 8) -> str:
    """A PingPong run of `limit` conversations played and judged by a scripted model into `db`; its run id.

    The player always says `reply`; the judges score replies containing "good" 4, others 2.
    """
    catalog = load_catalog(REPO / "models.toml")
    config = RunConfig(
        scenarios=["pingpong"],
        players=["smollm2-135m"],
        interrogator="smollm2-135m",
        panel=Panel(name="gate", judges=judges),
        seed=3,
        limit=limit,
        models_file=str(catalog.source),
    )
    with Store.open(db) as store:
        summary = Runner(catalog, store, scripted_factory(_judge_by_reply(reply))).execute(
            config, [load_family("pingpong")]
        )
    return summary.run_id


def drain(backend: Backend, requests: list[GenerationRequest]) -> list[Completion]:
    """Submit the requests together and step the backend until all are done; completions in request order."""
    tickets = [backend.submit(request) for request in requests]
    done: dict[int, Completion] = {}
    while backend.busy:
        done.update(backend.step())
    return [done[ticket] for ticket in tickets]


def ask_model(pool: ModelPool, model: str, requests: list[GenerationRequest]) -> list[Completion]:
    """The requests to `model` through the pool's scheduler (which tells a shared backend the adapter)."""

    async def ask(request: GenerationRequest, scheduler: Scheduler) -> Completion:
        return await scheduler.generate(model, request)

    return pool.play(requests, ask)


def store_contents(db: Path) -> dict[str, Counter[tuple[Any, ...]]]:
    """Every table of a store file as a multiset of rows (schema_version aside: it records when it was
    applied), so that a rebuilt store can be compared with the one it replaces."""
    with duckdb.connect(str(db), read_only=True) as connection:
        tables = [
            str(name)
            for (name,) in connection.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY 1"
            ).fetchall()
            if name != "schema_version"
        ]
        return {table: Counter(connection.execute(f'SELECT * FROM "{table}"').fetchall()) for table in tables}


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    """Poll until `condition` holds. The deadline is long because it costs nothing when the condition
    comes early, and a loaded machine gets the time it needs; the failure says what never came."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.05)


class LineReader:
    """The lines of a subprocess's text stream, read by a thread, so that a test waits for a line with
    a deadline instead of blocking forever in `readline()`."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._ended = False

        def pump() -> None:
            for line in stream:
                self._lines.put(line)
            self._lines.put(None)

        threading.Thread(target=pump, daemon=True).start()

    def next_line(self, timeout_s: float) -> str | None:
        """The next line; None at the end of the stream."""
        if self._ended:
            return None
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout_s:g} s after: {self.seen[-5:]}") from None
        if line is None:
            self._ended = True
            return None
        self.seen.append(line)
        return line

    def wait_for(self, fragment: str, timeout_s: float = 600.0) -> str:
        """Read up to the first line containing `fragment`, and return it."""
        deadline = time.monotonic() + timeout_s
        while (line := self.next_line(max(0.0, deadline - time.monotonic()))) is not None:
            if fragment in line:
                return line
        raise AssertionError(f"the stream ended before '{fragment}': {self.seen[-5:]}")

    def rest(self, timeout_s: float = 600.0) -> str:
        """Everything up to the end of the stream."""
        deadline = time.monotonic() + timeout_s
        start = len(self.seen)
        while self.next_line(max(0.0, deadline - time.monotonic())) is not None:
            pass
        return "".join(self.seen[start:])


def forget_episode(store: Store, run_id: str, episode_id: str) -> None:
    """Leave an episode as a kill before its write leaves it: in neither the store nor its journal."""
    with store.transaction():
        for table in ("messages", "judgments", "scores", "episodes"):
            store.connection.execute(f"DELETE FROM {table} WHERE episode_id = ?", [episode_id])
    path = journal_folder(store.path) / f"{run_stream(run_id)}.jsonl"
    kept = [
        line
        for line in path.read_bytes().splitlines(keepends=True)
        if json.loads(line.partition(b" ")[2]).get("body", {}).get("episode_id") != episode_id
    ]
    path.write_bytes(b"".join(kept))
