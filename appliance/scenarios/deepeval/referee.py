"""The referee's message pool: anonymous seats and synchronous rounds.

Every participant sits at a seat with an anonymous id ("Player 2",
"Reviewer"); prompts are built from seat ids and the task's rules only, so
no model learns who it plays against. In each round the referee first fixes
every sender's prompt from what it had received by the end of the previous
round, then collects all replies; messages sent or posted in a round are
delivered only when the round ends. No participant can therefore see a
message of its own round. Each round's pool is stored in the episode's
metadata (`pool`), and which model sat where (`seats`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from appliance.catalog.sampling import Sampling
from appliance.engine.types import Message
from appliance.episodes.context import EpisodeContext

REFEREE = "Referee"


@dataclass(frozen=True)
class Seat:
    #: the anonymous name every prompt uses
    id: str
    #: the episode role whose model plays this seat ("player" or "partner")
    binding: str
    #: the rules this seat is briefed with (its system prompt)
    rules: str


@dataclass(frozen=True)
class PoolMessage:
    round: int
    sender: str
    recipients: tuple[str, ...]
    text: str


class Referee:
    """Owns the pool; tasks decide who sends, who receives what, and when the game ends."""

    def __init__(self, ctx: EpisodeContext, seats: Sequence[Seat]) -> None:
        self.ctx = ctx
        self.seats = {seat.id: seat for seat in seats}
        #: seat -> the model playing it (stored with the episode; never shown in a prompt)
        self.models = {seat.id: ctx.model_for(seat.binding) for seat in seats}
        ctx.metadata["seats"] = dict(self.models)
        self.rounds: list[list[PoolMessage]] = []
        self._sent: list[PoolMessage] = []
        self._conversation = {seat.id: [Message(role="system", content=seat.rules)] for seat in seats}
        self._unread: dict[str, list[PoolMessage]] = {seat.id: [] for seat in seats}

    @property
    def round(self) -> int:
        """The number of the round in progress (the briefing before the first round is round 0)."""
        return len(self.rounds)

    def post(self, text: str, to: Sequence[str]) -> None:
        """A referee message, delivered to `to` when this round ends."""
        self._sent.append(PoolMessage(self.round, REFEREE, tuple(to), text))
        self.ctx.record_note(f"{REFEREE} to {', '.join(to)}", text)

    async def collect(
        self,
        senders: Sequence[str],
        *,
        sampling: Sampling,
        grammar: str | None = None,
        forward_to: Callable[[str], Sequence[str]] = lambda seat: (),
    ) -> dict[str, str]:
        """Every sender's reply to what it has received so far, keyed by seat.

        All prompts are fixed before the first request goes out. A reply is
        forwarded verbatim to `forward_to(sender)` when the round ends; tasks
        that relay only a parsed move post it themselves instead.
        """
        prompts = {seat: [*self._conversation[seat], self._inbox_message(seat)] for seat in senders}
        completions = await asyncio.gather(
            *(
                self.ctx.generate(
                    self.seats[seat].binding,
                    prompts[seat],
                    sampling=sampling,
                    grammar=grammar,
                    conversation=seat,
                    record=False,
                )
                for seat in senders
            )
        )
        replies: dict[str, str] = {}
        for seat, completion in zip(senders, completions, strict=True):
            self.ctx.record_message(seat, self.models[seat], completion)
            self._conversation[seat] = [*prompts[seat], Message(role="assistant", content=completion.text)]
            self._sent.append(PoolMessage(self.round, seat, tuple(forward_to(seat)), completion.text))
            replies[seat] = completion.text
        return replies

    def end_round(self) -> None:
        """Deliver everything sent in this round, store the round's pool, start the next round."""
        for message in self._sent:
            for recipient in message.recipients:
                self._unread[recipient].append(message)
        self.rounds.append(self._sent)
        self._sent = []
        self.ctx.metadata["pool"] = [
            {"round": number, "messages": [asdict(message) for message in messages]}
            for number, messages in enumerate(self.rounds)
        ]

    def _inbox_message(self, seat: str) -> Message:
        """What `seat` has received since it last spoke, as one user turn (and marks it read)."""
        unread, self._unread[seat] = self._unread[seat], []
        lines = [m.text if m.sender == REFEREE else f"{m.sender}: {m.text}" for m in unread]
        return Message(role="user", content="\n\n".join(lines) or "(no new messages)")
