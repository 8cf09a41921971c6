"""Langevin dynamics and the two-layer net (Droplets): equilibrium of the optimizer, and the cubic teacher.

Seeds: chains 0..K-1 for the quadratic potential; teacher_seed 0 and student seed 0 for the teacher.
"""

import math

import pytest
import torch

from grokray.engine import make_trainer
from grokray.optim.group import GroupOptimizer
from grokray.spec.blocks import OptimConfig
from grokray.spec.build import build_spec
from grokray.tasks.teacher import hermite3


def stationary_variance(k, temperature, lr, wd, chains=50, burn=300, steps=12000, first_seed=0):
    """Sample variance of K independent 1-D Langevin chains in the potential k θ²/2 (+ wd θ²/2 via the decay)."""
    theta = torch.zeros((chains, 1), dtype=torch.float64)
    grad = torch.zeros_like(theta)
    cfg = OptimConfig(name="langevin", lr=lr, weight_decay=wd, temperature=temperature)
    opt = GroupOptimizer(theta, grad, [cfg] * chains, list(range(first_seed, first_seed + chains)), salt=1)
    active = torch.ones((chains, 1), dtype=torch.bool)
    total, count = 0.0, 0
    for t in range(burn + steps):
        torch.mul(theta, k, out=grad)  # ∇U for U = k θ²/2
        opt.step(t, active)
        if t >= burn:
            total += float(theta.pow(2).mean())
            count += 1
    return total / count


@pytest.mark.parametrize(
    ("k", "wd", "temperature", "first_seed"), [(2.0, 0.0, 0.5, 0), (0.0, 4.0, 0.1, 100), (1.0, 1.0, 1.0, 200)]
)
def test_langevin_stationary_variance_is_T_over_k(k, wd, temperature, first_seed):
    # Continuous-time equilibrium of dθ = −(k + γ)θ dt + √(2T) dW is N(0, T/(k + γ)); the discrete chain with
    # step η has T/(k(1 − ηk/2)), 1% off at ηk = 0.02. Chains first_seed.. first_seed+49, 12000 steps each,
    # integrated correlation time of θ² ~49 steps: ~1.3% sampling error, so 10% is ~7 standard errors.
    # Measured ratios var·(k + γ)/T: 1.037, 1.026, 1.009 (first seeds 0, 100, 200).
    stiffness = k + wd
    lr = 0.02 / stiffness
    var = stationary_variance(k, temperature, lr, wd, first_seed=first_seed)
    assert var == pytest.approx(temperature / stiffness, rel=0.1)


def test_langevin_at_zero_temperature_is_gradient_descent():
    var = stationary_variance(1.0, 0.0, 0.1, 0.0, chains=4, burn=0, steps=10)
    assert var == 0.0


TEACHER = {
    "task": {"name": "cubic_teacher", "d": 10, "n_test": 1000, "epsilon": 0.3, "tolerance": 0.3},
    "model": {"name": "two_layer", "width": 100},
    "optim": {"default": {"name": "langevin", "lr": 0.1, "weight_decay": 1e-2, "temperature": 1e-5}},
    "train": {"steps": 1500},
    "phases": {"budget": 1500, "gap": 500, "stop_when_classified": False},
}


def test_cubic_teacher_targets_are_hermite():
    data = build_spec(TEACHER).first_trial().task.data()
    w = data.meta["teacher"]
    z = data.x @ w
    assert float(w.norm()) == pytest.approx(1.0)
    assert torch.allclose(data.y, z + 0.3 * hermite3(z))
    # test set fixed across n_train, training sets nested
    small = build_spec(TEACHER, ["task.n_train=50"]).first_trial().task
    big = build_spec(TEACHER, ["task.n_train=200"]).first_trial().task
    ds, db = small.data(), big.data()
    assert torch.equal(ds.x[small.split(ds, 0)[1]], db.x[big.split(db, 0)[1]])
    assert torch.equal(ds.x[:50], db.x[:50])


def test_cubic_teacher_test_rmse_falls_with_n_train():
    # Measured (student seed 0, teacher_seed 0, 1500 steps): test RMSE 0.756 / 0.501 / 0.316 at n_train
    # 20 / 100 / 500 (target std 1.25); accuracy within 0.3: 0.69 / 0.84 / 0.94.
    # The hidden units turn toward the teacher more the more data there is (the teacher_overlap curve, mean |cos|):
    # measured 0.248 at step 0, final 0.26 / 0.39 / 0.51.
    rmse, overlap_curve = {}, {}
    for n in (20, 100, 500):
        trainer = make_trainer([build_spec(TEACHER, [f"task.n_train={n}"]).first_trial()])
        trainer.run()
        rmse[n] = math.sqrt(trainer.results()[0].final["val/loss"])
        overlap_curve[n] = trainer.results()[0].curve["teacher_overlap"]
    assert rmse[20] > rmse[100] > rmse[500]
    assert rmse[500] < 0.5 * rmse[20]
    assert overlap_curve[20][-1] < overlap_curve[100][-1] < overlap_curve[500][-1]
    assert overlap_curve[500][-1] > 1.5 * overlap_curve[500][0]
    # the n = 500 student has learned the linear part of the teacher (measured He₁ coefficient 0.86, He₃ 0.14 of 0.3)
    data = trainer.data
    test = data.x[500:]
    overlap = trainer.model.teacher_overlap(test, data.meta["teacher"])
    assert abs(float(overlap["he1"][0]) - 1.0) < 0.2
