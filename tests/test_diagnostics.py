"""Family diagnostic curves: Fourier concentration on modular tasks, teacher overlap on the cubic teacher."""

import math

import pytest
import torch

from grokray.engine import make_trainer
from grokray.models.diagnostics import fourier_concentration, operand_columns
from grokray.spec.build import build_spec


def residues(p):
    return torch.arange(p, dtype=torch.float64)


@pytest.mark.parametrize("p", [23, 24])
def test_single_sinusoid_columns_have_concentration_one(p):
    a = residues(p)
    w = torch.stack([torch.cos(2 * math.pi * 3 * a / p + 0.3), 2 * torch.sin(2 * math.pi * 5 * a / p),
                     torch.cos(math.pi * a) + 7.0], 1)  # the last: p/2 for even p (else mixed), plus a constant
    value = fourier_concentration(w[None, :, :2], p)
    assert value.shape == (1,) and float(value[0]) == pytest.approx(1.0, abs=1e-12)
    if p % 2 == 0:
        assert float(fourier_concentration(w[None], p)[0]) == pytest.approx(1.0, abs=1e-12)


def test_random_weights_are_spread_and_zero_padding_changes_nothing():
    gen = torch.Generator().manual_seed(0)
    w = torch.randn((3, 23, 64), generator=gen, dtype=torch.float64)
    value = fourier_concentration(w, 23)
    assert ((value > 0.2) & (value < 0.35)).all(), value  # 11 folded frequencies: about 0.27
    padded = torch.cat([w, torch.zeros(3, 23, 16, dtype=torch.float64)], 2)  # narrower members are zero-padded
    assert torch.equal(fourier_concentration(padded, 23), value)
    mixed = w[:, :, :1] + torch.cos(2 * math.pi * residues(23) / 23).view(1, -1, 1) * 100
    assert float(fourier_concentration(mixed, 23)[0]) > 0.99


def test_operand_columns_split_a_first_layer_by_operand():
    w = torch.arange(2 * 5 * 3).reshape(1, 10, 3)
    cols = operand_columns(w, 5)
    assert cols.shape == (1, 5, 6)
    assert torch.equal(cols[0, :, :3], w[0, :5]) and torch.equal(cols[0, :, 3:], w[0, 5:])


MODULAR = {"task": {"name": "modular", "op": "add", "p": 7, "train_fraction": 0.6}, "train": {"steps": 20}}


@pytest.mark.parametrize(
    "model",
    [
        {"name": "toy", "embed_dim": 4, "hidden": [8], "head": "classification"},
        {"name": "transformer", "d_model": 8, "n_heads": 2, "d_mlp": 16},
        {"name": "quadratic", "width": 8},
        {"name": "two_layer", "width": 8},
    ],
    ids=lambda m: m["name"],
)
def test_modular_runs_log_a_fourier_curve_at_every_recorded_step(model):
    spec = build_spec(MODULAR | {"model": model, "optim": {"default": {"name": "adamw", "lr": 1e-2}}})
    trainer = make_trainer(spec.trials())
    trainer.run()
    result = trainer.results()[0]
    curve = result.curve["fourier_concentration"]
    assert len(curve) == len(result.curve["step"]) > 5
    assert all(0.0 < v <= 1.0 for v in curve)
    assert result.final["fourier_concentration"] == curve[-1]


def test_non_modular_tasks_log_no_fourier_curve():
    spec = build_spec({"task": {"name": "addition", "p": 5, "train_fraction": 0.6},
                       "model": {"name": "toy", "embed_dim": 2, "hidden": [8]}, "train": {"steps": 5}})
    trainer = make_trainer(spec.trials())
    trainer.run()
    assert "fourier_concentration" not in trainer.results()[0].curve


def test_teacher_overlap_curve_is_the_students_alignment():
    spec = build_spec({
        "task": {"name": "cubic_teacher", "d": 10, "n_train": 200, "n_test": 100},
        "model": {"name": "two_layer", "width": 32},
        "optim": {"default": {"name": "langevin", "lr": 0.05, "weight_decay": 1e-3, "temperature": 1e-6}},
        "train": {"steps": 50},
        "seeds": [0, 1],
    })
    trainer = make_trainer(spec.trials())
    trainer.run()
    direct = trainer.model.teacher_overlap(trainer.data.x[:5], trainer.data.meta["teacher"])["cos"]
    for k, result in enumerate(trainer.results()):
        curve = result.curve["teacher_overlap"]
        assert len(curve) == len(result.curve["step"])
        assert result.final["teacher_overlap"] == pytest.approx(float(direct[k]), rel=1e-5)
