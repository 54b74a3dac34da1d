from pathlib import Path

from appliance.catalog.models import load_catalog
from appliance.catalog.sampling import Sampling
from appliance.engine.types import ResolvedSampling
from appliance.episodes.client import judge_clean_layers
from appliance.episodes.roles import bind_role

REPO = Path(__file__).resolve().parent.parent


def test_later_layers_win_field_by_field() -> None:
    model = Sampling(temperature=0.2, repeat_penalty=1.1)
    method = Sampling(temperature=0.6, top_p=0.9)
    override = Sampling(top_p=0.5)
    resolved = ResolvedSampling.from_layers(model, method, override)
    assert resolved.temperature == 0.6
    assert resolved.top_p == 0.5
    assert resolved.repeat_penalty == 1.1
    assert resolved.max_tokens == ResolvedSampling().max_tokens


def test_unset_layers_change_nothing() -> None:
    resolved = ResolvedSampling.from_layers(Sampling(stop=["\n"]), None, Sampling())
    assert resolved.stop == ("\n",)
    assert resolved.temperature == 0.0


def _judged(model: str, role: str, method: Sampling) -> ResolvedSampling:
    catalog = load_catalog(REPO / "models.toml")
    binding = bind_role(catalog, model, role)
    return ResolvedSampling.from_layers(
        *judge_clean_layers(role, binding.model_sampling, method, binding.role_override, None)
    )


def test_judges_and_greedy_requests_read_without_the_models_repeat_penalty() -> None:
    """The embedded models' entries carry a repeat penalty (1.1, 1.15) for their sampled players only."""
    assert _judged("gemma3-270m", "judge", Sampling(temperature=0.0)).repeat_penalty == 1.0
    assert _judged("smollm2-135m", "judge", Sampling(temperature=0.1)).repeat_penalty == 1.0
    assert _judged("smollm2-135m", "player", Sampling(temperature=0.0)).repeat_penalty == 1.0
    assert _judged("smollm2-135m", "player", Sampling(temperature=0.6)).repeat_penalty == 1.1
    assert _judged("gemma3-270m", "player", Sampling(temperature=0.7)).repeat_penalty == 1.15
    # a penalty the method asks for stays
    assert _judged("smollm2-135m", "judge", Sampling(repeat_penalty=1.3)).repeat_penalty == 1.3


def test_a_judges_temperature_is_the_methods() -> None:
    """DeepEval's three verdicts at 1.0 are sampled at 1.0 by Gemma too (its entry once forced 0 on judges)."""
    assert _judged("gemma3-270m", "judge", Sampling(temperature=1.0)).temperature == 1.0
    assert _judged("smollm2-135m", "judge", Sampling(temperature=0.1)).temperature == 0.1


def test_a_role_override_keeps_its_repeat_penalty_and_wins(tmp_path: Path) -> None:
    text = (REPO / "models.toml").read_text()
    models = tmp_path / "models.toml"
    models.write_text(text + "\n[models.smollm2-135m.roles.judge]\nrepeat_penalty = 1.2\ntemperature = 0.3\n")
    binding = bind_role(load_catalog(models), "smollm2-135m", "judge")
    resolved = ResolvedSampling.from_layers(
        *judge_clean_layers("judge", binding.model_sampling, Sampling(temperature=1.0), binding.role_override, None)
    )
    assert (resolved.repeat_penalty, resolved.temperature) == (1.2, 0.3)
