"""The plain driver: PingPong as a lab would script it on an inference engine without the appliance.

It stands for the script a user writes around vLLM (`LLM.generate` over lists of prompts): one
engine per model with prefix caching on; each phase of a turn is one batch over every conversation
(every interrogator question, then every player reply), and after the last turn each judge reads
every reply in one batch. There are no episodes, no scheduling across conversations (a phase waits
for its slowest conversation) and no store. The requests are the PingPong family's own (the same
views, sampling and judge template) and go through the same backend, which for vLLM sends each
batch as one `LLM.generate`: the difference in wall time is what the appliance's runner, scheduler
and store cost or save, with the engine held equal.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from appliance.bench.e2e import ArmResult, EndToEndResult, with_side_arm
from appliance.bench.rss import PeakRss
from appliance.catalog.models import Catalog
from appliance.catalog.panels import Panel
from appliance.episodes.client import ModelClient
from appliance.episodes.pool import ModelPool
from appliance.episodes.roles import episode_roles
from appliance.episodes.scheduler import Scheduler
from appliance.errors import ApplianceError
from appliance.judging.scoring import scoring_features
from appliance.scenarios.pingpong.family import (
    INTERROGATOR_SAMPLING,
    PLAYER_SAMPLING,
    PingPongFamily,
    PingPongInstance,
    answered,
    asked,
    clean_interrogator_message,
    judge_variables,
)
from appliance.scenarios.pingpong.judging import replies_in_context

#: (speaker, text) of each message of one conversation, in order
Spoken = list[tuple[str, str]]


def with_plain_arm(
    e2e: EndToEndResult,
    catalog: Catalog,
    family: PingPongFamily,
    *,
    player: str,
    interrogator: str,
    panel: Panel,
    seed: int,
) -> EndToEndResult:
    """`e2e` with the plain driver's arm on the same workload, and how many messages differ from the
    appliance's (greedy: none, where the engine's numbers do not depend on the batch)."""
    plain, texts = plain_pingpong(
        catalog,
        family,
        conversations=e2e.conversations,
        turns=e2e.turns,
        player=player,
        interrogator=interrogator,
        panel=panel,
        seed=seed,
    )
    return with_side_arm(e2e, "plain", plain, texts)


def plain_pingpong(
    catalog: Catalog,
    family: PingPongFamily,
    *,
    conversations: int,
    turns: int,
    player: str,
    interrogator: str,
    panel: Panel,
    seed: int,
) -> tuple[ArmResult, list[str]]:
    """The workload's time and tokens, and every stored message's text (to set beside the appliance's)."""
    template_name = panel.likelihood_template_or_none
    if template_name is None:
        raise ApplianceError(f"panel '{panel.name}': the plain driver plays likelihood panels only")
    template = family.scoring_template(template_name)
    instances = [
        instance
        for instance in family.select_instances(family.instances(), conversations, seed)
        if isinstance(instance, PingPongInstance)
    ]
    started = time.perf_counter()  # loading the models counts, as it does in the appliance's arms
    with (
        PeakRss() as rss,
        ModelPool.load(catalog, [player, interrogator, *panel.judges], parallel=len(instances)) as pool,
    ):
        roles = episode_roles(catalog, player, player, {"interrogator": interrogator}, panel.judges)

        async def workload(batch: list[PingPongInstance], scheduler: Scheduler) -> list[Spoken]:
            clients = [ModelClient(f"plain-{i}", seed, scheduler, roles, force_greedy=True) for i in range(len(batch))]
            spoken = await _converse(family, batch, clients, turns)
            features = [
                scoring_features(client, template, shown, judge, f"lik-{target}")
                for client, instance, said in zip(clients, batch, spoken, strict=True)
                for target, shown in replies_in_context(judge_variables(instance), instance.card.greeting, said)
                for judge in panel.judges
            ]
            await asyncio.gather(*features)  # every judge's requests of every reply: one batch per judge
            return spoken

        # the whole workload is one piece of work: its phases, not a scheduler across episodes, set the batches
        spoken = pool.play([instances], workload)[0]
        wall = time.perf_counter() - started
        counters = pool.counters()
    result = ArmResult(
        wall_s=wall,
        episodes=len(instances),
        episodes_per_hour=len(instances) * 3600 / wall if wall else 0.0,
        prefill_tokens=sum(c.prompt_tokens - c.cached_prompt_tokens for c in counters),
        cached_prompt_tokens=sum(c.cached_prompt_tokens for c in counters),
        decode_tokens=sum(c.completion_tokens for c in counters),
        peak_kv_cells=max((c.peak_kv_cells for c in counters), default=0),
        peak_rss_mb=rss.peak_mb,
        start_rss_mb=rss.start_mb,
        requests=sum(c.requests for c in counters),
    )
    return result, [text for said in spoken for _, text in said]


async def _converse(
    family: PingPongFamily, instances: Sequence[PingPongInstance], clients: Sequence[ModelClient], turns: int
) -> list[Spoken]:
    """Every conversation's turns, each phase one batch: all questions, then all replies."""
    views = [family.conversation_views(instance) for instance in instances]
    spoken: list[Spoken] = [[] for _ in instances]
    for _ in range(turns):
        questions = await asyncio.gather(
            *(
                client.generate("interrogator", view, sampling=INTERROGATOR_SAMPLING)
                for client, (_, view) in zip(clients, views, strict=True)
            )
        )
        for (player_view, interrogator_view), said, question in zip(views, spoken, questions, strict=True):
            text = clean_interrogator_message(question.text)
            said.append(("interrogator", text))
            asked(player_view, interrogator_view, text)
        replies = await asyncio.gather(
            *(
                client.generate("player", view, sampling=PLAYER_SAMPLING)
                for client, (view, _) in zip(clients, views, strict=True)
            )
        )
        for (player_view, interrogator_view), said, reply in zip(views, spoken, replies, strict=True):
            said.append(("player", reply.text))
            answered(player_view, interrogator_view, reply.text)
    return spoken
