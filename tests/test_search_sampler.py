"""search.startup: TPE's first trials are a scrambled Sobol' design that spreads over every searched axis (real
Optuna), where Optuna's random start put degrok_toy's first six decoder weight decays all in 6.4-9.3."""

import math
import warnings
from pathlib import Path

import optuna
import pytest

from grokray.errors import SpecError
from grokray.search.config import parse_search
from grokray.search.sampler import distributions, make_sampler, startup_trials
from grokray.spec.build import load_spec

DEGROK = Path(__file__).resolve().parents[1] / "sweeps" / "degrok_toy.yaml"
optuna.logging.set_verbosity(optuna.logging.ERROR)


def _draws(cfg, n, study=None):
    study = study or optuna.create_study(sampler=make_sampler(cfg))
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TPE's experimental-feature notes
        for i in range(n):
            trial = study.ask(distributions(cfg))
            out.append(trial.params)
            study.tell(trial, float(i))
    return out


def _unit(dist, value) -> float:
    if dist.log:
        return (math.log(value) - math.log(dist.low)) / (math.log(dist.high) - math.log(dist.low))
    return (value - dist.low) / (dist.high - dist.low)


def test_the_first_trials_take_one_quarter_of_every_axis_each():
    cfg = parse_search(load_spec(DEGROK, ["search.n_trials=16"]))
    assert startup_trials(cfg) == 4
    space = distributions(cfg)
    first = _draws(cfg, 4)
    for name, dist in space.items():
        quarters = sorted(int(4 * _unit(dist, p[name])) for p in first)
        assert quarters == [0, 1, 2, 3], (name, [p[name] for p in first])


def test_degrok_toys_first_six_draws_span_the_decoder_weight_decay():
    cfg = parse_search(load_spec(DEGROK))
    wd = [p["optim.decoder.weight_decay"] for p in _draws(cfg, 6)]
    assert min(wd) < 2.5 and max(wd) > 7.5, wd  # Optuna's random start: all six in 6.4-9.3
    random_start = parse_search(load_spec(DEGROK, ["search.startup=random"]))
    assert [p["optim.decoder.weight_decay"] for p in _draws(random_start, 6)] != wd


def test_a_resumed_study_continues_the_same_design():
    cfg = parse_search(load_spec(DEGROK))
    whole = _draws(cfg, 6)
    study = optuna.create_study(sampler=make_sampler(cfg))
    _draws(cfg, 2, study)
    study.sampler = make_sampler(cfg, offset=2)  # what a --resume builds
    assert _draws(cfg, 3, study) == whole[2:5]


def test_int_and_categorical_axes_take_their_values_from_the_design():
    cfg = parse_search(load_spec(DEGROK, ["search.space={model.embed_dim: {int: [1, 64], log: true},"
                                          " optim.decoder.name: {categorical: [adamw, adam]}}", "search.n_trials=32"]))
    draws = _draws(cfg, startup_trials(cfg))
    assert {p["optim.decoder.name"] for p in draws} == {"adamw", "adam"}
    assert all(isinstance(p["model.embed_dim"], int) and 1 <= p["model.embed_dim"] <= 64 for p in draws)
    dims = sorted(p["model.embed_dim"] for p in draws)
    assert dims[0] <= 2 and dims[-1] >= 32 and len(set(dims)) >= len(dims) - 2, dims  # spread over the log range


@pytest.mark.parametrize(("sets", "says"), [
    (["search.startup=grid"], "search.startup: got 'grid'; allowed: sobol, random"),
    (["search.sampler=random", "search.startup=sobol"], "search.startup: has no effect with sampler: random"),
])
def test_a_startup_that_cannot_apply_is_one_clear_line(sets, says):
    with pytest.raises(SpecError) as err:
        parse_search(load_spec(DEGROK, sets))
    assert says in str(err.value)


def test_a_presets_search_keeps_a_study_of_its_own(tmp_path, capsys):
    """Issue 61: the README's commands in order: after the `--scale smoke` search the full one refused ("study
    already exists ... pass --resume"), then refused the resume (a study made from another budget). A preset that
    changes the search now names its own study; the full search starts its own; an empty preset (reduced: {})
    is the spec itself and shares it; a named study is kept."""
    from grokray.search.study import open_storage, open_study

    studies = {scale: parse_search(load_spec(DEGROK, scale=scale)).study for scale in (None, "smoke", "reduced")}
    assert studies == {None: "degrok-toy", "smoke": "degrok-toy-smoke", "reduced": "degrok-toy"}
    assert parse_search(load_spec(DEGROK, ["search.study=mine"], scale="smoke")).study == "mine"
    opened = {}
    for scale in ("smoke", None):  # in the README's order, on one results folder: both studies open
        spec = load_spec(DEGROK, scale=scale)
        cfg = parse_search(spec)
        storage, label = open_storage(cfg, str(tmp_path))
        opened[cfg.study] = open_study(spec, cfg, storage, label, resume=False).study_name
    assert opened == {"degrok-toy-smoke": "degrok-toy-smoke", "degrok-toy": "degrok-toy"}
    smoke = load_spec(DEGROK, ["search.study=degrok-toy"], scale="smoke")  # the smoke search on the full one's
    cfg = parse_search(smoke)
    with pytest.raises(SpecError, match="made from a different .*-s search.study=degrok-toy-2"):
        open_study(smoke, cfg, *open_storage(cfg, str(tmp_path)), resume=False)
    from grokray.cli import main  # the dry-run refuses what the launch refuses, and makes nothing

    dry = ["search", str(DEGROK), "--dry-run", "--no-calibrate", "--storage", str(tmp_path)]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main([*dry, "--scale", "smoke", "-s", "search.study=degrok-toy"]) == 2
    assert "-s search.study=degrok-toy-2" in capsys.readouterr().err
    assert main(dry) == 2  # the same search: --resume is the advice
    assert "already exists" in (err := capsys.readouterr().err) and "pass --resume" in err
    assert main([*dry, "--scale", "smoke", "-s", "search.study=fresh"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == before
