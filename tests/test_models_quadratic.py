"""Quadratic two-layer net on x + y mod 23 ("Why do you grok", Gromov): grokking, and small init shortens the delay.

Fraction 0.5, width 200, full batch. Measured:
- classification, normalized GD lr 4, L2 3e-4 (seeds 0-3): train 0.9 at step 5-9, val 0.8 at 230-263, val 0.9 at
  353-575; with the init times 10 instead the gap at 0.9 is 603-1779 instead of 344-566;
- regression (MSE to one-hot), AdamW lr 3e-3, wd 5 (seed 0): gap 231 (init 1) vs 137 (init 0.1); at wd 1: 1662
  vs 575.
"""

import pytest

from grokray.engine import make_trainer
from grokray.spec.build import build_spec


def run_pack(raw):
    spec = build_spec(raw)
    trainer = make_trainer(spec.trials())
    trainer.run()
    return {p["optim.default.init_scale"]: r for p, r in zip(spec.points(), trainer.results(), strict=True)}


CLASSIFICATION_STEPS = 3000


@pytest.fixture(scope="module")
def classification():
    """One pack: normalized GD lr 4, L2 3e-4 (the paper's appendix A.2 recipe at a smaller lr), He-normal init
    times 1 or 10, thresholds 0.8 and 0.9, seeds 0-3. Members stop once their phase is decided."""
    raw = {
        "task": {"name": "modular", "op": "add", "p": 23, "train_fraction": 0.5},
        "model": {"name": "quadratic", "width": 200, "head": "classification"},
        "optim": {"default": {"name": "normalized_gd", "lr": 4.0, "weight_decay": 3e-4}},
        "train": {"steps": CLASSIFICATION_STEPS},
        "phases": {"budget": CLASSIFICATION_STEPS, "gap": 100},
        "seeds": [0, 1, 2, 3],
        "sweep": {"optim.default.init_scale": {"values": [1.0, 10.0]}, "phases.threshold": {"values": [0.8, 0.9]}},
    }
    spec = build_spec(raw)
    trainer = make_trainer(spec.trials())
    trainer.run()
    return [({k.rsplit(".", 1)[-1]: v for k, v in point.items()}, r)
            for point, r in zip(spec.points(), trainer.results(), strict=True)]


def test_classification_with_normalized_gd_groks(classification):
    """Normalized GD at a constant step length fits the train set within 10 steps and generalizes hundreds of
    steps later, but never settles: val accuracy hovers at 0.8-0.9, so its first crossing of 0.9 moves by
    hundreds of steps with float rounding (seed 1 crossed at 1400 with an earlier input encoding, 523 now).
    The 0.8 crossing is stable and is pinned; 0.9 is only required to be reached within 2000 steps. Measured
    (seeds 0-3, init 1): train 0.9 at 5-9; val 0.8 at 230-263, val 0.9 at 353-575."""
    for point, r in classification:
        if point["init_scale"] != 1.0:
            continue
        assert r.phase == "grokking" and r.step_train < 20, (point, r.step_train, r.step_val)
        # the hidden units become single Fourier modes over Z_23 as the net generalizes (seed 0: 0.27 -> 0.88)
        fourier = [v for v in r.curve["fourier_concentration"] if v is not None]  # a crossing's row measures
        assert fourier[0] < 0.35 and fourier[-1] > 0.7, (point, fourier[0], fourier[-1])  # the accuracies only
        if point["threshold"] == 0.8:
            assert 150 <= r.step_val <= 600, (point, r.step_val)
        else:
            assert r.step_val <= 2000 and r.step_val - r.step_train >= 100, (point, r.step_val)


def test_classification_dividing_the_init_by_10_shortens_the_gap(classification):
    """Gromov's footnote 1: a smaller initialisation leaves the kernel regime sooner, so the net overfits less
    and the delay shrinks. Init 10 -> 1 (seeds 0-3, measured): gap at 0.8 529/429/510/409 -> 256/252/233/225;
    at 0.9 925/1779/936/603 -> 410/514/566/344 (seeds 4, 5: 1404 -> 1318, 488 -> 399). Each seed is compared at
    0.8, where crossings are stable; at 0.9 the sum over seeds is (a member that never crosses counts the
    rest of its budget, a lower bound on its gap)."""
    gaps = {}
    for point, r in classification:
        assert r.step_train is not None and r.step_train < 50, (point, r.step_train)
        gap = r.gap if r.gap is not None else CLASSIFICATION_STEPS - r.step_train
        gaps[point["init_scale"], point["threshold"], point["seed"]] = gap
    for seed in range(4):
        assert gaps[1.0, 0.8, seed] < 0.75 * gaps[10.0, 0.8, seed], (seed, gaps)
    small, large = (sum(gaps[init, 0.9, seed] for seed in range(4)) for init in (1.0, 10.0))
    assert small < 0.75 * large, gaps


def test_regression_smaller_init_shortens_the_gap():
    raw = {
        "task": {"name": "modular", "op": "add", "p": 23, "train_fraction": 0.5},
        "model": {"name": "quadratic", "width": 200, "head": "regression"},
        "optim": {"default": {"name": "adamw", "lr": 3e-3, "weight_decay": 5.0}},
        "train": {"steps": 600},
        "phases": {"budget": 600, "gap": 100},
        "sweep": {"optim.default.init_scale": {"values": [1.0, 0.1]}},
    }
    by = run_pack(raw)
    assert by[1.0].gap is not None and by[0.1].gap is not None
    assert by[0.1].gap < 0.8 * by[1.0].gap
    assert by[1.0].phase == "grokking"
