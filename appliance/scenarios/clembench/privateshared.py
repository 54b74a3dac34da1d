"""Private/shared: a customer fills a form for a programmatic questioner, and is probed on
what the questioner already knows.

Before the first request and after each answer, the game master asks aside
probes ("does the agent know X?") that stay out of the chat history. Parse
rules: answers start with the answer tag and are one line; probe replies
start with the aside tag and say yes or no, re-asked up to `probe_retries`
times before the episode aborts. A slot counts as known once it was asked
for, or once the player gave its value away early. Quality: the harmonic
mean of slot-filling accuracy and Cohen's kappa of the probes (truncated at
0), times 100, as clembench scores it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from appliance.scenarios.clembench.gamedata import load_toml, need, new_instance
from appliance.scenarios.clembench.games import Game, PublishedItem, register_game
from appliance.scenarios.clembench.instances import ClemInstance
from appliance.scenarios.clembench.master import GameTable, Outcome, Seat
from appliance.util.stats import cohen_kappa


def quality(slot_accuracy: float, kappa: float) -> float:
    kappa = max(0.0, kappa)
    return 0.0 if slot_accuracy + kappa == 0 else 100 * 2 * slot_accuracy * kappa / (slot_accuracy + kappa)


def one_line(reply: str) -> bool:
    return "\n" not in reply.strip("\n")


def parse_probe(reply: str, tags: dict[str, str]) -> int | None:
    """1 for yes, 0 for no, None when the reply breaks the aside format."""
    if not reply.startswith(tags["aside"]) or not one_line(reply):
        return None
    answer = reply[len(tags["aside"]) :].strip().lower()
    if answer.startswith(tags["yes"]):
        return 1
    if answer.startswith(tags["no"]):
        return 0
    return None


async def probe_round(
    seat: Seat, table: GameTable, params: dict[str, Any], known: dict[str, int], round_index: int, preamble: str
) -> list[tuple[int, int]]:
    """(gold, answer) for each slot; the gold is 1 when the slot is known by this round."""
    results = []
    for slot in params["slots"]:
        question = preamble + params["probes"][slot]
        answer = None
        for attempt in range(int(params["probe_retries"])):
            prefix = params["retry_prefixes"][attempt - 1] + " " if attempt else ""
            answer = parse_probe(await seat.ask(prefix + question, remember=False), params["tags"])
            if answer is not None:
                table.requests.ok()
                break
            table.requests.violated += 1
        if answer is None:
            raise table.requests.broken(f"no yes/no aside about '{slot}' after {params['probe_retries']} tries")
        results.append((int(round_index > known[slot]), answer))
    return results


async def play(table: GameTable, params: dict[str, Any]) -> Outcome:
    seat = table.seat("player", "answerer", f"{params['tags']['answer']} {table.sentence()}")
    slots: dict[str, str] = params["slots"]
    order: list[str] = params["request_order"]
    #: the round after which each slot is known to the questioner (its request turn unless given away earlier)
    known = {slot: order.index(slot) for slot in slots}
    intro = params["intro"] + "\n\n"  # the first thing the player reads, before the first probe or request
    probes = await probe_round(seat, table, params, known, 0, intro)
    filled: list[int] = []
    for turn, slot in enumerate(order):
        request = f"{params['tags']['questioner']} {params['requests'][slot]}"
        reply = await seat.ask(intro + request if turn == 0 else request)
        if not reply.startswith(params["tags"]["answer"]) or not one_line(reply):
            raise table.requests.broken("the answer does not start with the answer tag on one line")
        table.requests.ok()
        filled.append(int(slots[slot].lower() in reply.lower()))
        for other, value in slots.items():
            if value.lower() in reply.lower() and turn < known[other]:
                known[other] = turn
        probes += await probe_round(seat, table, params, known, turn + 1, "")
    gold = [g for g, _ in probes]
    answers = [a for _, a in probes]
    accuracy = sum(g == a for g, a in probes) / len(probes)
    kappa = cohen_kappa(gold, answers) or 0.0  # undefined (no variation to agree on) counts as none
    slot_accuracy = sum(filled) / len(filled)
    extra: dict[str, float | None] = {
        "Accuracy": accuracy,
        "Kappa": kappa,
        "Slot-Filling-Accuracy": slot_accuracy,
    }
    won = accuracy == 1 and slot_accuracy == 1
    return Outcome("success" if won else "lose", quality(slot_accuracy, kappa), extra)


def privateshared_params(
    data: dict[str, Any], path: Path, experiment: str, slots: dict[str, str], order: list[str], intro: str | None
) -> dict[str, Any]:
    """The parameters of one private/shared game; `intro` overrides ours (published instances bring theirs)."""
    spec = need(need(data, "experiments", path), experiment, path)
    tags = dict(need(data, "tags", path))
    tags["questioner"] = need(spec, "tag", path)

    def question(kind: str, slot: str) -> str:
        if kind in spec:
            return str(need(spec[kind], slot, path))
        return str(need(spec, f"{kind[:-1]}_template", path)).format(slot=slot)

    if intro is None:
        details = "\n".join(f"{slot.upper()}: {value}" for slot, value in slots.items())
        intro = need(need(data, "intro", path), "text", path).format(
            persona=spec["persona"], details=details, other=spec["other"], tag=tags["questioner"]
        )
    return {
        "slots": slots,
        "request_order": order,
        "intro": intro,
        "tags": tags,
        "requests": {slot: question("requests", slot) for slot in slots},
        "probes": {slot: f"{tags['me']} {question('probes', slot)}" for slot in slots},
        "probe_retries": data.get("probe_retries", 3),
        "retry_prefixes": data.get("retry_prefixes", []),
    }


def privateshared_instances(folder: Path, rng: random.Random, count: int) -> list[ClemInstance]:
    path = folder / "privateshared.toml"
    data = load_toml(path)
    instances = []
    for experiment, spec in need(data, "experiments", path).items():
        if "values" not in spec:
            continue
        for index in range(count):
            slots = {slot: rng.choice(values) for slot, values in spec["values"].items()}
            order = list(slots)
            rng.shuffle(order)
            params = privateshared_params(data, path, experiment, slots, order, None)
            instances.append(new_instance("privateshared", experiment, index, params))
    return instances


def convert_published(published: PublishedItem) -> tuple[str, dict[str, Any]]:
    """Their intro verbatim; the request and probe questions from our data (clembench keeps them elsewhere)."""
    item, path = published.item, published.data_folder / "privateshared.toml"
    params = privateshared_params(
        load_toml(path),
        path,
        published.experiment["name"],
        dict(item["slots"]),
        list(item["request_order"]),
        item["initial_prompt"],
    )
    params["tags"]["questioner"] = f"{item['tag']}:"
    return "privateshared", params


async def play_instance(table: GameTable, instance: ClemInstance) -> Outcome:
    return await play(table, instance.params)


GAME = register_game(
    Game(
        name="privateshared",
        play=play_instance,
        generate=privateshared_instances,
        convert=convert_published,
        order=40,
    )
)
