from pathlib import Path

import pytest

from appliance.judging.likert import likert_grammar, parse_likert, verdict_records
from appliance.judging.templates import LikertTemplate, load_likert_template

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def template() -> LikertTemplate:
    return load_likert_template(REPO / "judges" / "pingpong_likert.toml")


def test_grammar_lists_every_criterion_and_the_scale(template: LikertTemplate) -> None:
    grammar = likert_grammar(template)
    for criterion in template.criteria:
        assert f'\\"{criterion}\\": ' in grammar
    assert "digit ::= [1-5]" in grammar
    assert '\\"refusal\\": " boolean' in grammar


def test_parse_valid_verdict(template: LikertTemplate) -> None:
    verdict = parse_likert('{"in_character": 4, "entertaining": 2, "fluent": 5, "refusal": false}', template)
    assert verdict == {"in_character": 4.0, "entertaining": 2.0, "fluent": 5.0, "refusal": 0.0}


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
def test_parse_rejects_broken_verdicts(template: LikertTemplate, text: str) -> None:
    assert parse_likert(text, template) is None


def test_unparsed_reply_is_stored_not_dropped(template: LikertTemplate) -> None:
    records = verdict_records("garbage", template, panel="p", judge="j", target_idx=3)
    assert len(records) == len(template.criteria) + 1
    assert all(not r.parsed and r.score is None and r.raw_text == "garbage" for r in records)
