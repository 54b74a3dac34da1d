"""SimulateBench rules: answer parsing, CA weighting, perturbations, the importer, a scripted run."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.catalog.models import load_catalog
from appliance.catalog.panels import Panel
from appliance.engine.scripted import ScriptedBackend
from appliance.engine.types import GenerationRequest
from appliance.errors import ApplianceError
from appliance.run.runner import Runner
from appliance.run_config import RunConfig
from appliance.scenarios import load_family
from appliance.scenarios.simulatebench.answers import parse_choice
from appliance.scenarios.simulatebench.family import ProfileInstance
from appliance.scenarios.simulatebench.importer import import_simulatebench, parse_question, variant_label
from appliance.scenarios.simulatebench.metrics import authors_answer_matches, consistency_accuracy, rcov
from appliance.scenarios.simulatebench.perturb import CANDIDATES, all_text, perturb, variants
from appliance.scenarios.simulatebench.profile import NOT_ENOUGH_INFORMATION, Profile, load_profiles
from appliance.scenarios.simulatebench.render import size_line
from appliance.scenarios.simulatebench.report import build_consistency_report
from appliance.store import Store
from appliance.store.run_view import RunView

REPO = Path(__file__).resolve().parent.parent
PROFILES = REPO / "scenarios" / "simulatebench"
PEER = REPO.parent / "shared" / "datasets" / "peers" / "simulatebench"
OPTIONS = ["1975", "1978", "the University of Leeds", NOT_ENOUGH_INFORMATION]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("B", 1),
        ("B) 1978", 1),
        ("(C) the University of Leeds", 2),
        ("My answer is D.", 3),
        ("Answer: b", 1),
        ("I was born in 1978, of course.", 1),
        ("the university of leeds!", 2),
        ("I'm afraid I don't know that.", 3),
        ("That is not mentioned in my life story.", 3),
        ("I'm sorry, but as an AI I cannot role-play this.", None),  # a refusal chooses nothing
        ("Either 1975 or 1978.", None),  # two options named: no choice
        ("", None),
        ("A dog barked outside.", None),  # the word "A" is not option A
    ],
)
def test_answer_parsing(reply: str, expected: int | None) -> None:
    assert parse_choice(reply, OPTIONS) == expected


def test_option_text_containing_another_prefers_the_longer_one() -> None:
    options = ["the fourth grade", "the fourth grade and the fifth grade", NOT_ENOUGH_INFORMATION]
    assert parse_choice("I teach the fourth grade and the fifth grade.", options) == 1
    assert parse_choice("I teach the fourth grade.", options) == 0


def test_ca_is_the_authors_weighted_mean_on_hand_computed_data() -> None:
    # type a: 3 answerable (2 right), 1 unanswerable (right); type b: 4 answerable (1 right), 2 unanswerable (0 right)
    results = [("a", True, True)] * 2 + [("a", True, False), ("a", False, True)]
    results += [("b", True, True)] + [("b", True, False)] * 3 + [("b", False, False)] * 2
    # n_a / N = 4/10, n_b / N = 6/10
    answerable = 0.4 * (2 / 3) + 0.6 * (1 / 4)
    unanswerable = 0.4 * 1.0 + 0.6 * 0.0
    assert consistency_accuracy(results) == pytest.approx(0.9 * answerable + 0.1 * unanswerable)
    # a type without "not enough information" questions counts its answerable accuracy for both kinds
    assert consistency_accuracy([("a", True, True), ("a", True, False)]) == pytest.approx(0.5)
    # claiming ignorance everywhere earns at most the 0.1 share
    assert consistency_accuracy([("a", True, False)] * 8 + [("a", False, True)] * 2) == pytest.approx(0.1)
    assert consistency_accuracy([]) is None


@pytest.mark.parametrize(
    ("gold", "answer", "expected"),
    [
        ("Homer Simpson", "homer simpson", True),
        ("Homer Simpson", "My name is Homer Simpson!", True),  # the gold answer inside the reply
        ("65 or above", "65", True),  # the reply inside the gold answer: the authors' test is generous
        ("65 or above", "", True),
        ("45-54", "55-64", False),
    ],
)
def test_authors_answer_test(gold: str, answer: str, expected: bool) -> None:
    assert authors_answer_matches(gold, answer) is expected


def test_rcov_is_sample_std_over_mean_in_percent() -> None:
    assert rcov([0.5, 0.5, 0.5]) == 0.0
    # mean 0.5, sample std sqrt(((0.1)^2 + (0.1)^2) / 1) = 0.1414
    assert rcov([0.4, 0.6]) == pytest.approx(0.1414213562 / 0.5 * 100)
    assert rcov([0.7]) is None


@pytest.fixture(scope="module")
def profiles() -> list[Profile]:
    return load_profiles(PROFILES)


def test_six_profiles_cover_every_part_and_both_kinds_of_question(profiles: list[Profile]) -> None:
    assert len(profiles) >= 6
    for profile in profiles:
        parts = {q.part for q in profile.questions}
        assert parts == {"immutable", "social_role", "relationship"}, profile.id
        assert any(not q.answerable for q in profile.questions) and any(q.answerable for q in profile.questions)
        assert set(profile.fields) == {"surname", "birth_year", "education", "ethnicity"}, profile.id


@pytest.mark.parametrize("field", sorted(CANDIDATES))
def test_perturbation_changes_every_mention_and_nothing_else(profiles: list[Profile], field: str) -> None:
    for profile in profiles:
        old = profile.fields[field]
        new = next(v for v in CANDIDATES[field] if v not in all_text(profile))
        variant = perturb(profile, field, new)
        pattern = re.compile(rf"(?<![\w]){re.escape(old)}(?![\w])")
        assert not pattern.search(all_text(variant)), (profile.id, field)
        mentions = len(pattern.findall(all_text(profile)))
        assert mentions >= 1 and all_text(variant).count(new) == mentions, (profile.id, field)
        assert all_text(variant).replace(new, old) == all_text(profile)  # nothing else moved
        answers = {q.id: q.answer for q in variant.questions}
        assert all(q.answer in q.options for q in variant.questions) and len(answers) == len(profile.questions)
        assert variant.base == profile.id and variant.fields[field] == new


def test_generated_variants_avoid_values_already_in_the_profile(profiles: list[Profile]) -> None:
    for profile in profiles:
        made = variants(profile, per_field=2, seed=0)
        assert len(made) == 8
        for variant in made:
            _, _, value = variant.variant.partition("=")
            assert value not in all_text(profile)


def test_unknown_field_and_unmentioned_value_are_clear_errors(profiles: list[Profile]) -> None:
    with pytest.raises(ApplianceError, match=r"fields\.height"):
        perturb(profiles[0], "height", "2 m")
    broken = profiles[0].model_copy(update={"fields": {"surname": "Nobody"}})
    with pytest.raises(ApplianceError, match="not mentioned"):
        perturb(broken, "surname", "Somebody")


def test_published_question_format() -> None:
    raw = {
        "question": "Your gender?[this is a single-choice question,you should only choose from: Male;Female;"
        "There's not enough information to answer this question]",
        "gold_answer": "There's not enough information to answer this question.",
    }
    question, options, answer = parse_question(raw, "q") or ("", [], "")
    assert question == "Your gender?" and options[:2] == ["Male", "Female"]
    assert answer == options[2]  # the trailing period differs in the published data
    assert parse_question({"question": "what is your name?", "gold_answer": "Homer"}, "q") is None
    assert variant_label("1985") == "birth_year=1985" and variant_label("surname_Garcia") == "surname=Garcia"
    assert variant_label("Middle_Eastern") == "ethnicity=Middle_Eastern"


def test_importer_reads_the_published_profiles_and_variants(tmp_path: Path) -> None:
    if not PEER.is_dir():
        pytest.skip(f"{PEER} is absent (../shared/datasets is not next to this clone)")
    profiles, questions, skipped = import_simulatebench(PEER, tmp_path)
    assert profiles >= 50 and questions > 7000 and skipped > 0
    imported = {p.id: p for p in load_profiles(tmp_path)}
    homer = imported["homer"]
    assert homer.base is None and "742 Evergreen Terrace" in homer.text()
    assert {q.part for q in homer.questions} == {"immutable", "social_role", "relationship"}
    assert imported["homer_1985"].base == "homer" and imported["homer_1985"].variant == "birth_year=1985"
    assert "1985" in imported["homer_1985"].text() and "1956" not in imported["homer_1985"].text()
    assert sum(1 for p in imported.values() if p.base == "homer") == 48


def test_importer_rejects_a_folder_of_something_else(tmp_path: Path) -> None:
    with pytest.raises(ApplianceError, match="profile/ not found"):
        import_simulatebench(tmp_path, tmp_path / "out")


def answer_key() -> dict[tuple[str, frozenset[str]], str]:
    """(question, options) -> right option, over every profile the family plays."""
    key: dict[tuple[str, frozenset[str]], str] = {}
    for instance in load_family("simulatebench").stages()[0].instances():
        assert isinstance(instance, ProfileInstance)
        for q in instance.profile.questions:
            key[(q.question, frozenset(q.options))] = q.answer
    return key


def scripted_player(key: dict[tuple[str, frozenset[str]], str]) -> Callable[[GenerationRequest], str]:
    """Right on every answerable question; refuses (unparsable) where the answer is 'not enough information'."""

    def respond(request: GenerationRequest) -> str:
        text = request.messages[1].content
        options = re.findall(r"^([A-J])\) (.+)$", text, re.MULTILINE)
        answer = key[(text.splitlines()[0], frozenset(option for _, option in options))]
        if "not enough information" in answer:
            return "I'm sorry, I cannot answer that as an AI."
        return next(f"{letter}) {option}" for letter, option in options if option == answer)

    return respond


def test_scripted_run_scores_ca_and_rcov(tmp_path: Path) -> None:
    catalog = load_catalog(REPO / "models.toml")
    family = load_family("simulatebench")
    config = RunConfig(
        scenarios=["simulatebench"],
        players=["smollm2-135m"],
        interrogator="smollm2-135m",
        panel=Panel(name="none", judges=["smollm2-135m"]),
        limit=2,
        models_file=str(catalog.source),
    )
    with Store.open(tmp_path / "db.duckdb") as store:
        runner = Runner(
            catalog, store, lambda c, spec, parallel: ScriptedBackend(spec.name, scripted_player(answer_key()))
        )
        summary = runner.execute(config, [family])
        report = build_consistency_report(RunView(store, summary.run_id, "simulatebench"))
        stored = json.loads(store.query("SELECT metadata FROM episodes LIMIT 1")[0][0])
    assert summary.episodes_finished == 12  # 6 characters x (base + 1 variant)
    (row,) = report.rows
    # the scripted player gets every answerable question right and every unanswerable one wrong (it refuses)
    assert row.ca == pytest.approx(0.9)
    assert row.characters == 6 and row.ca_ci is not None
    assert row.unparsed_answers > 0 and row.not_fitting == 0
    assert row.rcov_by_field and all(value == pytest.approx(0.0) for value in row.rcov_by_field.values())
    assert {"character", "variant", "field"} <= set(stored)
    # the run's size beside the paper's: 13 questions per shipped profile, RCoV over base + 1 variant
    assert (row.questions_per_character, row.rcov_values) == (13, 2)
    assert row.profile_tokens is not None and row.profile_tokens > 1000  # the mock counts characters
    assert "13 questions per character, RCoV over 2 values; the paper's characters" in size_line(row)


def test_option_order_is_shuffled_once_per_character(profiles: list[Profile]) -> None:
    from appliance.scenarios.simulatebench.family import shuffled_options

    positions = []
    for profile in profiles:
        variant = perturb(profile, "surname", next(v for v in CANDIDATES["surname"] if v not in all_text(profile)))
        for base_q, variant_q in zip(profile.questions, variant.questions, strict=True):
            base_order = shuffled_options(base_q, profile.family_id, 0)
            variant_order = shuffled_options(variant_q, variant.family_id, 0)
            assert base_order.index(base_q.answer) == variant_order.index(variant_q.answer)
            positions.append(base_order.index(base_q.answer))
    assert len(set(positions)) == 4  # the right answer is not always in the same place
