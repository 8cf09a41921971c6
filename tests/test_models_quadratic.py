"""Quadratic two-layer net on x + y mod 23 ("Why do you grok", Gromov): grokking, and small init shortens the delay.

Seed 0 (split and weights), fraction 0.5, width 200, full batch. Measured:
- classification, normalized GD lr 4, L2 3e-4: train 0.9 at step 5-9, val 0.8 at 230-263, val 0.9 at 353-575
  (seeds 0-3);
- regression (MSE to one-hot), AdamW lr 3e-3, wd 5: gap 231 (init 1) vs 137 (init 0.1); at wd 1: 1662 vs 575.
"""

from grokray.engine import make_trainer
from grokray.spec import build_spec


def run_pack(raw):
    spec = build_spec(raw)
    trainer = make_trainer(spec.trials())
    trainer.run()
    return {p["optim.default.init_scale"]: r for p, r in zip(spec.points(), trainer.results(), strict=True)}


def test_classification_with_normalized_gd_groks():
    """Normalized GD at a constant step length fits the train set within 10 steps and generalizes hundreds of
    steps later, but never settles: val accuracy hovers at 0.8-0.9, so its first crossing of 0.9 moves by
    hundreds of steps with float rounding (seed 1 crossed at 1400 with an earlier input encoding, 523 now).
    The 0.8 crossing is stable and is pinned; 0.9 is only required to be reached within 2000 steps. Measured
    (seeds 0-3, one pack): train 0.9 at 5-9; val 0.8 at 230-263, val 0.9 at 353-575."""
    raw = {
        "task": {"name": "modular", "op": "add", "p": 23, "train_fraction": 0.5},
        "model": {"name": "quadratic", "width": 200, "head": "classification"},
        "optim": {"default": {"name": "normalized_gd", "lr": 4.0, "weight_decay": 3e-4}},
        "train": {"steps": 2000},
        "phases": {"budget": 2000, "gap": 100},
        "seeds": [0, 1, 2, 3],
        "sweep": {"phases.threshold": {"values": [0.8, 0.9]}},
    }
    spec = build_spec(raw)
    trainer = make_trainer(spec.trials())
    trainer.run()
    for point, r in zip(spec.points(), trainer.results(), strict=True):
        assert r.phase == "grokking" and r.step_train < 20, (point, r.step_train, r.step_val)
        # the hidden units become single Fourier modes over Z_23 as the net generalizes (seed 0: 0.27 -> 0.88)
        fourier = r.curve["fourier_concentration"]
        assert fourier[0] < 0.35 and fourier[-1] > 0.7, (point, fourier[0], fourier[-1])
        if point["phases.threshold"] == 0.8:
            assert 150 <= r.step_val <= 600, (point, r.step_val)
        else:
            assert r.step_val <= 2000 and r.step_val - r.step_train >= 100, (point, r.step_val)


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
