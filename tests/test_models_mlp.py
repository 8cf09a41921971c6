"""Image MLP (Liu et al. appendix J, Omnigrok): a large initialisation α delays generalization on digits.

Seeds 0, 1, 2 (the seed draws both the 200-image training subset and the weights). Measured at these settings
(cross-entropy, AdamW lr 3e-3, wd 1, width 64, 200 training digits, full batch): α = 8 reaches train acc 1.0
at steps 144/96/80 and val acc 0.9 at steps 409/259/292 (gaps 350/193/247 from train 0.9 at 59/66/45);
α = 1 crosses both together (gaps 26/14/16).
"""

import pytest

from grokray.engine import make_trainer
from grokray.errors import SpecError
from grokray.spec.build import build_spec

DIGITS = {
    "task": {"name": "images", "dataset": "digits", "train_size": 200},
    "model": {"name": "mlp", "depth": 3, "width": 64, "activation": "relu", "loss": "cross_entropy"},
    "optim": {"default": {"name": "adamw", "lr": 3e-3, "weight_decay": 1.0}},
    "train": {"steps": 600},
    "phases": {"budget": 600, "gap": 100},
    "seeds": [0, 1, 2],
    "sweep": {"optim.default.init_scale": {"values": [8, 1]}},
}


def first_step(curve, key, value):
    return next((s for s, v in zip(curve["step"], curve[key], strict=True) if v >= value), None)


def test_large_init_fits_first_and_generalizes_later():
    spec = build_spec(DIGITS)
    trainer = make_trainer(spec.trials())  # one pack: 3 seeds x 2 init scales
    trainer.run()
    by = {(p["optim.default.init_scale"], p["seed"]): r for p, r in zip(spec.points(), trainer.results(), strict=True)}
    for seed in (0, 1, 2):
        big, small = by[(8, seed)], by[(1, seed)]
        fit = first_step(big.curve, "train/acc", 1.0)
        assert fit is not None and big.step_val is not None
        assert big.step_val - fit >= 100  # train acc is 1 well before val passes 0.9
        assert big.gap >= 150 and big.phase == "grokking"
        assert small.gap is not None and small.gap < 50 and small.phase == "comprehension"
        assert small.gap < big.gap / 3


def test_mnist_needs_a_local_path():
    raw = {"task": {"name": "images", "dataset": "mnist"}, "model": {"name": "mlp"}}
    with pytest.raises(SpecError) as err:
        build_spec(raw)
    assert err.value.field == "task.path"
    raw["task"]["path"] = "/nonexistent/mnist"
    with pytest.raises(SpecError, match="does not exist") as err:
        build_spec(raw)
    assert err.value.field == "task.path"


def test_mnist_reads_a_local_npz(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    path = tmp_path / "mnist.npz"
    np.savez(path, x_train=rng.integers(0, 256, (50, 28, 28), dtype=np.uint8), y_train=rng.integers(0, 10, 50),
             x_test=rng.integers(0, 256, (20, 28, 28), dtype=np.uint8), y_test=rng.integers(0, 10, 20))
    raw = {"task": {"name": "images", "dataset": "mnist", "path": str(path), "train_size": 30},
           "model": {"name": "mlp", "width": 8}, "train": {"steps": 3}}
    task = build_spec(raw).first_trial().task
    data = task.data()
    train, val = task.split(data, 0)
    assert data.x.shape == (70, 784) and float(data.x.max()) <= 1.0
    assert len(train) == 30 and int(train.max()) < 50 and val.tolist() == list(range(50, 70))


def test_last_layer_has_its_own_group_and_init_scale():
    raw = {"task": {"name": "images", "train_size": 100}, "model": {"name": "mlp", "width": 16},
           "optim": {"hidden": {"init_scale": 2.0}, "last": {"init_scale": 0.5, "lr": 0.1}}}
    cfg = build_spec(raw).first_trial()
    assert cfg.optim["last"].lr == 0.1 and cfg.optim["hidden"].lr == 1e-3
    trainer = make_trainer([cfg])
    model = trainer.model
    assert set(model.flat) == {"hidden", "last"}
    assert model.flat["last"].shape[1] == 16 * 10 + 10  # fc2: weight and bias
    base = make_trainer([build_spec(raw, ["optim.hidden.init_scale=1", "optim.last.init_scale=1"]).first_trial()])
    assert (model.flat["hidden"] - 2.0 * base.model.flat["hidden"]).abs().max() < 1e-6
    assert (model.flat["last"] - 0.5 * base.model.flat["last"]).abs().max() < 1e-6
