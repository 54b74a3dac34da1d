from appliance.engine.types import ResolvedSampling
from appliance.sampling import Sampling


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
