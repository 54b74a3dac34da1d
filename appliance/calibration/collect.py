"""Every judge of a panel rates every labelled item, through the batched engine.

Each item is a small episode on the scheduler, so a panel rates hundreds of
items with the judges' requests decoded together. Verdicts are stored per
item as they finish (keyed by template fingerprint and criterion), so an
interrupted calibration resumes and a second calibration of the same panel
costs no decoding.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable

from appliance.catalog.models import Catalog
from appliance.catalog.panels import Panel
from appliance.engine.factory import open_backend
from appliance.episodes.client import EpisodeFailed, ModelClient, derive_seed
from appliance.episodes.pool import ModelPool
from appliance.episodes.roles import BackendFactory, bind_role
from appliance.episodes.scheduler import Scheduler
from appliance.judging.scoring import pair_reading, scoring_features
from appliance.judging.scoring_templates import ExpectedScoreTemplate, LikelihoodTemplate
from appliance.judging.templates import JudgeTemplate, PairwiseTemplate, RatingTemplate
from appliance.judging.verdicts import in_order, judge_replies
from appliance.labels.model import LabelItem, LabelSet
from appliance.store import Store
from appliance.store.labels import cached_label_verdicts, write_label_verdicts
from appliance.store.records import LabelVerdict

GENERIC_SPEAKER = "System"
GENERIC_DESCRIPTION = "A conversational assistant talking with a user."

VerdictKey = tuple[str, str, bool]  # item, judge, order swapped


def item_variables(label_set: LabelSet, item: LabelItem, criterion: str, template: JudgeTemplate) -> dict[str, str]:
    """Placeholders any template may use; templates pick what they need.

    Turn items also fill the PingPong template's names ({name}, {description},
    {dialogue}, {reply}) so that judges of a scenario can be calibrated with
    the very template the scenario uses.
    """
    texts = item.texts
    help_text = template.criterion_help.get(criterion, "") if isinstance(template, RatingTemplate) else ""
    if label_set.kind == "pairwise":
        instruction = texts.get("instruction", "")
        texts = {**texts, "context": instruction + (f"\n{texts['input']}" if texts.get("input") else "")}
    variables = {
        "criterion": criterion,
        "criterion_help": help_text or f"the {criterion.lower()} of the response",
        **texts,
    }
    if label_set.kind == "turn":
        variables |= {
            "dialogue": texts["context"],
            "reply": texts["response"],
            "name": GENERIC_SPEAKER,
            "description": texts.get("persona") or GENERIC_DESCRIPTION,
        }
    elif label_set.kind == "dialogue":
        variables.setdefault("context", texts["dialogue"])
    else:
        variables.setdefault("input", "")
    return variables


def _variant(label_set: LabelSet, criterion: str, template: JudgeTemplate) -> str:
    """What a stored verdict depends on besides the item and template: likelihood features on nothing."""
    if isinstance(template, LikelihoodTemplate):
        return "features"
    return "preference" if label_set.kind == "pairwise" else criterion


def _orders(template: JudgeTemplate) -> tuple[bool, ...]:
    """Sampled pairwise verdicts are asked in both orders; feature differences cannot depend on order."""
    return (False, True) if isinstance(template, PairwiseTemplate) else (False,)


def collect_verdicts(
    store: Store,
    catalog: Catalog,
    panel: Panel,
    label_set: LabelSet,
    template: JudgeTemplate,
    criterion: str,
    items: list[LabelItem],
    *,
    seed: int = 0,
    parallel: int = 16,
    backend_factory: BackendFactory = open_backend,
    on_item: Callable[[int, int], None] | None = None,
) -> dict[VerdictKey, LabelVerdict]:
    """Verdicts of every judge on every item (and both orders for pairs), decoding only what is missing."""
    catalog.refuse_synthetic(panel.judges, "a calibration")
    fingerprint = template.fingerprint()
    variant = _variant(label_set, criterion, template)
    verdicts = cached_label_verdicts(store, label_set.name, fingerprint, variant)
    orders = _orders(template)
    todo: dict[str, list[tuple[str, bool]]] = {}
    for item in items:
        missing = [(j, o) for j in panel.judges for o in orders if (item.item_id, j, o) not in verdicts]
        if missing:
            todo[item.item_id] = missing
    if not todo:
        return verdicts
    judges_needed = sorted({judge for work in todo.values() for judge, _ in work})
    roles = {f"judge:{judge}": bind_role(catalog, judge, "judge") for judge in judges_needed}
    by_id = {item.item_id: item for item in items}
    done = 0

    async def rate(entry: tuple[LabelItem, list[tuple[str, bool]]], scheduler: Scheduler) -> list[LabelVerdict]:
        item, requests = entry
        client = ModelClient(
            f"label:{label_set.name}:{item.item_id}", derive_seed(seed, label_set.name, item.item_id), scheduler, roles
        )
        variables = item_variables(label_set, item, criterion, template)
        if isinstance(template, LikelihoodTemplate | ExpectedScoreTemplate):
            return list(
                await asyncio.gather(
                    *(
                        _feature_verdict(client, template, variables, judge, item.item_id, variant)
                        for judge, _ in requests
                    )
                )
            )
        return await _sampled_verdicts(client, template, variables, requests, item.item_id, variant)

    def written(entry: tuple[LabelItem, list[tuple[str, bool]]], found: list[LabelVerdict]) -> None:
        nonlocal done
        write_label_verdicts(store, label_set.name, template.name, fingerprint, found)
        verdicts.update({(v.item_id, v.judge, v.order_swapped): v for v in found})
        done += 1
        if on_item is not None:
            on_item(done, len(todo))

    with ModelPool.load(catalog, judges_needed, parallel=parallel, backend_factory=backend_factory) as pool:
        pool.play([(by_id[i], work) for i, work in todo.items()], rate, written)
    return verdicts


async def _feature_verdict(
    client: ModelClient,
    template: LikelihoodTemplate | ExpectedScoreTemplate,
    variables: dict[str, str],
    judge: str,
    item_id: str,
    variant: str,
) -> LabelVerdict:
    """One judge's features of an item (a pair: the first response's minus the second's)."""
    try:
        if "response_a" in variables:
            features = await pair_reading(client, template, variables, judge, judge)
        else:
            features = await scoring_features(client, template, variables, judge, judge)
    except EpisodeFailed as error:  # the item does not fit this judge's context: no features
        return LabelVerdict(
            item_id=item_id, judge=judge, variant=variant, score=None, raw_text=str(error), parsed=False
        )
    finite = {name: value for name, value in features.items() if math.isfinite(value)}
    summary = finite.get(template.summary)
    return LabelVerdict(
        item_id=item_id,
        judge=judge,
        variant=variant,
        score=summary,
        raw_text=json.dumps(finite),
        parsed=summary is not None,
        features=finite,
    )


async def _sampled_verdicts(
    client: ModelClient,
    template: JudgeTemplate,
    variables: dict[str, str],
    requests: list[tuple[str, bool]],
    item_id: str,
    variant: str,
) -> list[LabelVerdict]:
    """Every requested judge and order's sampled verdict, parsed to one summary score."""
    assert not isinstance(template, LikelihoodTemplate | ExpectedScoreTemplate)
    replies = await asyncio.gather(
        *(
            judge_replies(client, template, _shown(variables, swapped), judge, f"{judge}-{int(swapped)}")
            for judge, swapped in requests
        )
    )
    verdicts = []
    for (judge, swapped), texts in zip(requests, replies, strict=True):
        parsed = template.parse_samples(texts)
        score = None if parsed is None else template.summary_score(parsed)
        if swapped and score is not None:
            score = -score  # stored from the point of view of the first response (response_a)
        verdicts.append(
            LabelVerdict(
                item_id=item_id,
                judge=judge,
                variant=variant,
                order_swapped=swapped,
                score=score,
                raw_text="\n".join(texts),
                parsed=parsed is not None,
            )
        )
    return verdicts


def _shown(variables: dict[str, str], swapped: bool) -> dict[str, str]:
    if "response_a" not in variables:
        return variables  # not a pair
    return in_order(variables, variables["response_a"], variables["response_b"], swapped=swapped)
