"""Judge templates: grammars and strict parsers of the four modes, and the pairwise order rules."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.engine.scripted import ScriptedBackend
from appliance.engine.types import GenerationRequest, TokenScores
from appliance.errors import ApplianceError
from appliance.judging.scoring_templates import LikelihoodTemplate
from appliance.judging.templates import (
    LikertTemplate,
    PairwiseTemplate,
    RatingTemplate,
    RolesTemplate,
    YesNoTemplate,
    load_conversation_template,
    load_judge_template,
    load_likert_template,
    load_roles_template,
)
from appliance.judging.verdicts import PairVerdict, combine_orders, verdict_records

REPO = Path(__file__).resolve().parent.parent
JUDGES = REPO / "judges"


@pytest.fixture
def likert() -> LikertTemplate:
    return load_likert_template(JUDGES / "pingpong_likert.toml")


def test_every_shipped_template_loads_with_its_mode() -> None:
    modes = {
        path.stem: load_judge_template(path).mode
        for path in JUDGES.glob("*.toml")
        if path.stem not in ("panels", "pingpong_conversation", "deepeval_role_rating")
    }
    assert modes == {
        "pingpong_likert": "likert",
        "turn_rating": "rating",
        "dialogue_rating": "rating",
        "pairwise_preference": "pairwise",
        "simulbench_pairwise": "pairwise",
        "yesno_check": "yesno",
        "challenging_turn": "yesno",
        "simulbench_rating": "rating",
        "turn_likelihood": "likelihood",
        "turn_followups": "likelihood",
        "turn_followups_8": "likelihood",
        "dialogue_likelihood": "likelihood",
        "dialogue_followups": "likelihood",
        "instruction_likelihood": "likelihood",
        "turn_expected": "expected",
    }


def test_the_default_panels_follow_ups_are_the_ones_chosen_from_turn_followups() -> None:
    """docs/judging.md reports turn_followups_8 as these 8 + 8 of turn_followups (chosen on FED's fitting
    half); the same requests otherwise, so the two templates' features mean the same thing."""
    full = load_judge_template(JUDGES / "turn_followups.toml")
    half = load_judge_template(JUDGES / "turn_followups_8.toml")
    assert isinstance(full, LikelihoodTemplate) and isinstance(half, LikelihoodTemplate)
    assert half.positive == [full.positive[i - 1] for i in (2, 3, 5, 7, 8, 9, 15, 16)]
    assert half.negative == [full.negative[i - 1] for i in (1, 2, 3, 5, 6, 10, 11, 13)]
    fields = set(LikelihoodTemplate.model_fields) - {"name", "positive", "negative"}
    assert {name: getattr(half, name) for name in fields} == {name: getattr(full, name) for name in fields}


def test_conversation_template_scores_every_turn_after_a_bounded_reasoning() -> None:
    template = load_conversation_template(JUDGES / "pingpong_conversation.toml")
    grammar = template.grammar(3)
    assert grammar.count(" turn") == 3 and f"{{0,{template.reasoning_chars}}}" in grammar
    assert template.budget(3) >= template.reasoning_chars + 3 * template.tokens_per_turn
    turn = {"in_character": 4, "entertaining": 2, "fluent": 5, "refusal": False}
    text = json.dumps({"reasoning": "fine", "turns": [turn, {**turn, "refusal": True}, turn]})
    verdicts = template.parse_turns(text, 3)
    assert verdicts is not None and [v["refusal"] for v in verdicts] == [0.0, 1.0, 0.0]
    assert template.parse_turns(text, 2) is None  # one verdict per turn, no more, no fewer
    assert template.parse_turns(text[:-5], 3) is None  # cut short
    assert template.parse_turns(json.dumps({"turns": [{**turn, "fluent": 7}] * 3}), 3) is None
    with pytest.raises(ApplianceError, match=r"pingpong_likert\.toml: field 'mode'"):
        load_conversation_template(JUDGES / "pingpong_likert.toml")


def test_likert_grammar_lists_every_criterion_and_the_scale(likert: LikertTemplate) -> None:
    grammar = likert.grammar()
    for criterion in likert.criteria:
        assert f'\\"{criterion}\\": ' in grammar
    assert "digit ::= [1-5]" in grammar
    assert '\\"refusal\\": " boolean' in grammar


def test_likert_parses_a_valid_verdict(likert: LikertTemplate) -> None:
    verdict = likert.parse('{"in_character": 4, "entertaining": 2, "fluent": 5, "refusal": false}')
    assert verdict == {"in_character": 4.0, "entertaining": 2.0, "fluent": 5.0, "refusal": 0.0}
    assert verdict is not None and likert.summary_score(verdict) == pytest.approx(11 / 3)


@pytest.mark.parametrize(
    "text",
    [
        '{"in_character": 4, "entertaining": 2, "fluent": 5',  # cut by the token limit
        '{"in_character": 6, "entertaining": 2, "fluent": 5, "refusal": false}',  # off the scale
        '{"in_character": 4, "entertaining": 2, "refusal": false}',  # a criterion missing
        '{"in_character": true, "entertaining": 2, "fluent": 5, "refusal": false}',  # bool is not a score
        '{"in_character": 4, "entertaining": 2, "fluent": 5, "refusal": "no"}',
        "I would rate it a 4.",
    ],
)
def test_likert_rejects_broken_verdicts(likert: LikertTemplate, text: str) -> None:
    assert likert.parse(text) is None


def test_unparsed_reply_is_stored_not_dropped(likert: LikertTemplate) -> None:
    records = verdict_records(["garbage"], likert, panel="p", judge="j", target_idx=3)
    assert len(records) == len(likert.criteria) + 1
    assert all(not r.parsed and r.score is None and r.raw_text == "garbage" for r in records)
    assert {r.template for r in records} == {"pingpong_likert"}


def test_samples_are_averaged_and_unparsed_samples_left_out() -> None:
    template = RatingTemplate(name="r", system="s", user="u", samples=3, temperature=1.0)
    assert template.parse_samples(['{"score": 4}', '{"score": 9}', '{"score": 9']) == {"score": 6.5}
    assert template.parse_samples(["", "no"]) is None
    (record,) = verdict_records(['{"score": 2}', '{"score": 4}'], template, panel="p", judge="j", target_idx=0)
    assert record.score == 3.0 and record.raw_text == '{"score": 2}\n{"score": 4}'


def test_pairwise_verdicts_are_not_averaged() -> None:
    with pytest.raises(ValueError, match="samples must be 1"):
        PairwiseTemplate(name="p", system="s", user="u", samples=3)


def test_rating_grammar_and_parser_cover_exactly_the_scale() -> None:
    template = RatingTemplate(name="r", system="s", user="u", scale_min=1, scale_max=10)
    assert '"10" | "9"' in template.grammar() and '"1"' in template.grammar() and '"0"' not in template.grammar()
    assert template.parse('{"score": 10}') == {"score": 10.0}
    assert template.parse('{"score": 1}') == {"score": 1.0}
    for broken in ('{"score": 0}', '{"score": 11}', '{"score": "7"}', '{"score": 7', '{"rating": 7}'):
        assert template.parse(broken) is None, broken


def test_pairwise_parser_maps_a_b_tie_and_can_forbid_ties() -> None:
    template = PairwiseTemplate(name="p", system="s", user="u")
    assert template.parse('{"better": "A"}') == {"preference": 1.0}
    assert template.parse('{"better": "B"}') == {"preference": -1.0}
    assert template.parse('{"better": "tie"}') == {"preference": 0.0}
    assert template.parse('{"better": "a"}') is None
    strict = PairwiseTemplate(name="p", system="s", user="u", allow_tie=False)
    assert strict.parse('{"better": "tie"}') is None
    assert "tie" not in strict.grammar()


def test_yesno_parser() -> None:
    template = YesNoTemplate(name="y", system="s", user="u")
    assert template.parse('{"answer": "yes"}') == {"yes": 1.0}
    assert template.parse('{"answer": "no"}') == {"yes": 0.0}
    assert template.parse('{"answer": "maybe"}') is None


@pytest.mark.parametrize(
    ("original", "swapped", "outcome"),
    [
        (1.0, 1.0, "first"),  # first wins as A and as B
        (-1.0, -1.0, "second"),
        (0.0, 0.0, "tie"),
        (1.0, -1.0, "inconsistent"),  # the judge picked A both times
        (1.0, 0.0, "inconsistent"),  # a win in one order only is not a win
        (None, 1.0, "unparsed"),
    ],
)
def test_a_win_needs_both_orders(original: float | None, swapped: float | None, outcome: str) -> None:
    assert combine_orders(original, swapped) == outcome


def test_position_bias_is_picking_the_same_slot_twice() -> None:
    assert PairVerdict("j", 1.0, -1.0).position_biased  # A, then A again (first shown as B)
    assert PairVerdict("j", -1.0, 1.0).position_biased  # B twice
    assert not PairVerdict("j", 1.0, 1.0).position_biased
    assert not PairVerdict("j", 0.0, 0.0).position_biased


def test_template_with_unknown_mode_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "odd.toml"
    path.write_text('mode = "ranking"\nsystem = "s"\nuser = "u"\n')
    with pytest.raises(ApplianceError, match=r"odd\.toml"):
        load_judge_template(path)


def _pair_verdict(respond: Callable[[GenerationRequest], str]) -> PairVerdict:
    import asyncio

    from appliance.episodes.client import RoleBinding
    from appliance.episodes.context import EpisodeContext
    from appliance.episodes.scheduler import Scheduler
    from appliance.judging.verdicts import judge_pair

    template = load_judge_template(JUDGES / "pairwise_preference.toml")
    assert isinstance(template, PairwiseTemplate)
    scheduler = Scheduler({"j": ScriptedBackend("j", respond)})
    ctx = EpisodeContext("e", 0, scheduler, {"judge:j": RoleBinding("j")})

    async def run() -> PairVerdict:
        work = asyncio.ensure_future(
            judge_pair(
                ctx,
                template,
                {"instruction": "i", "input": ""},
                "good one",
                "bad one",
                judge_model="j",
                panel="p",
                target_idx=0,
            )
        )
        await scheduler.drive(work)
        return await work

    verdict = asyncio.run(run())
    assert [j.order_swapped for j in ctx.judgments] == [False, True]
    return verdict


def test_judge_pair_asks_both_orders_and_reads_them_for_the_first_response() -> None:
    def prefers_good(request: GenerationRequest) -> str:
        text = request.messages[1].content
        a = text.split("Response A:")[1].split("Response B:")[0]
        return '{"better": "A"}' if "good" in a else '{"better": "B"}'

    verdict = _pair_verdict(prefers_good)
    assert (verdict.original, verdict.swapped, verdict.outcome) == (1.0, 1.0, "first")
    biased = _pair_verdict(lambda request: '{"better": "A"}')
    assert biased.outcome == "inconsistent" and biased.position_biased


def test_judge_prompts_put_the_transcript_before_anything_that_varies_by_criterion() -> None:
    """Requests of one judge on one item share their KV prefix up to the end of the transcript only if
    the criterion comes after it: system prompts name no criterion, and the criterion's placeholders
    follow every transcript placeholder."""
    import tomllib

    transcript = ("{context}", "{response}", "{dialogue}", "{reply}", "{transcript}")
    varying = ("{criterion}", "{criterion_help}")
    checked = 0
    for path in sorted(JUDGES.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        system, user = str(data.get("system", "")), str(data.get("user", data.get("prompt", "")))
        if not any(mark in system + user for mark in varying):
            continue
        checked += 1
        assert not any(mark in system for mark in varying), f"{path.name}: the system prompt names the criterion"
        first_varying = min(user.index(mark) for mark in varying if mark in user)
        last_transcript = max((user.rindex(mark) for mark in transcript if mark in user), default=-1)
        assert last_transcript < first_varying, f"{path.name}: the criterion comes before the transcript"
    assert checked >= 3  # turn_rating, dialogue_rating, turn_expected


def test_simulbenchs_pairwise_judge_explains_before_its_choice() -> None:
    template = load_judge_template(JUDGES / "simulbench_pairwise.toml")
    assert isinstance(template, PairwiseTemplate) and template.reasoning_chars == 300
    grammar = template.grammar()
    assert grammar.index("reasoning") < grammar.index("better")  # the explanation comes first
    assert template.parse('{"reasoning": "A prints the path; B chats.", "better": "A"}') == {"preference": 1.0}
    assert template.parse('{"reasoning": "same", "better": "tie"}') == {"preference": 0.0}
    assert "real interface" in template.system and "order in which the replies are shown" in template.system
    with pytest.raises(ValueError, match="max_tokens must hold reasoning_chars"):
        PairwiseTemplate(name="x", system="s", user="u", reasoning_chars=300, max_tokens=64)


def _rate_roles(backend: ScriptedBackend, template: RolesTemplate, *, reads: bool) -> dict[str, float | None]:
    """One judge rates the Programmer and the Reviewer (last messages 3 and 4) in one verdict."""
    import asyncio

    from appliance.episodes.client import RoleBinding
    from appliance.episodes.context import EpisodeContext
    from appliance.episodes.scheduler import Scheduler
    from appliance.judging.verdicts import ask_roles

    scheduler = Scheduler({"j": backend})
    likelihood = "turn_followups" if reads else None
    ctx = EpisodeContext("e", 0, scheduler, {"judge:j": RoleBinding("j")}, likelihood_template=likelihood)
    variables = {"task": "t", "roles": "Programmer and the Reviewer", "criteria": "c", "transcript": "x"}

    async def run() -> dict[str, float | None]:
        work = asyncio.ensure_future(
            ask_roles(ctx, template, variables, {"Programmer": 3, "Reviewer": 4}, judge_model="j", panel="p")
        )
        await scheduler.drive(work)
        return await work

    verdict = asyncio.run(run())
    assert [(j.target_idx, j.score) for j in ctx.judgments] == [(3, verdict["Programmer"]), (4, verdict["Reviewer"])]
    return verdict


def test_deepevals_referee_rates_both_roles_in_one_verdict_with_a_basis_for_each() -> None:
    template = load_roles_template(JUDGES / "deepeval_role_rating.toml")
    assert template.reasoning_chars > 0
    roles = ["Programmer", "Reviewer"]
    grammar = template.grammar(roles)
    assert grammar.index("Programmer") < grammar.index("evaluation") < grammar.index("Reviewer")
    both = '{"Programmer": {"evaluation": "solves it", "score": 8}, "Reviewer": {"evaluation": "vague", "score": 3}}'
    assert template.parse_roles(both, roles) == {"Programmer": 8.0, "Reviewer": 3.0}
    assert template.parse_roles('{"Programmer": {"evaluation": "cut sh', roles) is None
    assert template.parse_roles('{"Programmer": {"score": 8}, "Reviewer": {"score": 11}}', roles) is None
    with pytest.raises(ValueError, match="identifier"):
        template.grammar(["Pro grammer", "Reviewer"])
    # sampled: the samples that parse are averaged role by role, and one call carries both roles
    replies = iter([both, "{", both.replace('"score": 8', '"score": 6')])
    sampled = ScriptedBackend("j", lambda request: next(replies))
    assert _rate_roles(sampled, template, reads=False) == {"Programmer": 7.0, "Reviewer": 3.0}
    assert len(sampled.requests) == template.samples == 3
    assert all(request.grammar == grammar for request in sampled.requests)


def test_a_likelihood_panel_reads_the_roles_one_after_the_other() -> None:
    """Hand-set log-probabilities on a 1-2 scale: the Programmer's 1 and 2 at 1/4 and 3/4 give 1.75 and
    the verdict continues with its most probable 2; the Reviewer's then at 3/4 and 1/4 give 1.25."""
    template = RolesTemplate(name="r", system="{roles} {criteria}", user="{task} {transcript}", scale_max=2)
    scored = {
        '{"Programmer": {"score": 1}}': math.log(1 / 4),
        '{"Programmer": {"score": 2}}': math.log(3 / 4),
        '{"Programmer": {"score": 2}, "Reviewer": {"score": 1}}': math.log(3 / 4),
        '{"Programmer": {"score": 2}, "Reviewer": {"score": 2}}': math.log(1 / 4),
    }

    def scorer(request: GenerationRequest) -> TokenScores:
        assert request.scoring is not None
        return TokenScores(token_logprobs=(scored[request.scoring.continuation],), choice_logprobs=())

    backend = ScriptedBackend("j", lambda request: "unused: nothing is sampled", scorer=scorer)
    verdict = _rate_roles(backend, template, reads=True)
    assert verdict["Programmer"] == pytest.approx(1.75) and verdict["Reviewer"] == pytest.approx(1.25)
    assert len(backend.requests) == 4 and all(request.scoring is not None for request in backend.requests)
