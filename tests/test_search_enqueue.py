"""search.enqueue: a paper's published setting is the first trial its method's study asks for (real Optuna, a
journal file), and a setting outside the space is refused before anything starts."""

from pathlib import Path

import pytest

from grokray.errors import SpecError
from grokray.search.config import parse_search
from grokray.search.sampler import distributions, make_sampler
from grokray.search.study import open_storage, open_study
from grokray.spec.build import load_spec

DEGROK = Path(__file__).resolve().parents[1] / "sweeps" / "degrok_toy.yaml"


def test_enqueued_settings_are_asked_first_in_order(tmp_path):
    spec = load_spec(DEGROK, ["search.enqueue=[{optim.decoder.lr: 0.003, optim.decoder.weight_decay: 1.5},"
                              " {optim.decoder.lr: 0.0002}]"])
    cfg = parse_search(spec)
    assert cfg.enqueue == [{"optim.decoder.lr": 0.003, "optim.decoder.weight_decay": 1.5},
                           {"optim.decoder.lr": 0.0002}]
    storage, _ = open_storage(cfg, str(tmp_path))
    study = open_study(spec, cfg, storage, "test", resume=False)
    study.sampler = make_sampler(cfg)
    first, second, third = (study.ask(distributions(cfg)) for _ in range(3))
    assert first.params["optim.decoder.lr"] == 0.003 and first.params["optim.decoder.weight_decay"] == 1.5
    assert first.user_attrs["enqueued"] is True
    assert second.params["optim.decoder.lr"] == 0.0002  # its other fields are sampled
    assert "enqueued" not in third.user_attrs


@pytest.mark.parametrize(("value", "says"), [
    ("[{optim.decoder.lr: 0.5}]", "outside the space"),
    ("[{optim.decoder.lrr: 0.001}]", "unknown key; did you mean 'optim.decoder.lr'?"),
    ("{optim.decoder.lr: 0.001}", "expected a list"),
])
def test_an_enqueued_setting_outside_the_space_is_one_clear_line(value, says):
    with pytest.raises(SpecError) as err:
        parse_search(load_spec(DEGROK, [f"search.enqueue={value}"]))
    assert err.value.field.startswith("search.enqueue") and says in str(err.value)
