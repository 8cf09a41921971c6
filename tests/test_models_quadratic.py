"""Quadratic two-layer net on x + y mod 23 ("Why do you grok", Gromov): grokking, and small init shortens the delay.

Seed 0 (split and weights), fraction 0.5, width 200, full batch. Measured:
- classification, normalized GD lr 4, L2 3e-4: train 0.9 at step 8-9, val 0.9 first at 318-534 (init 1, 3 seeds);
- regression (MSE to one-hot), AdamW lr 3e-3, wd 5: gap 231 (init 1) vs 137 (init 0.1); at wd 1: 1662 vs 575.
"""

from grokray.engine import make_trainer
from grokray.spec import build_spec


def run_pack(raw):
    spec = build_spec(raw)
    trainer = make_trainer(spec.trials())
    trainer.run()
    return {p["optim.default.init_scale"]: r for p, r in zip(spec.points(), trainer.results(), strict=True)}


def test_classification_with_normalized_gd_reaches_val_0_9():
    """Normalized GD at a constant step length fits the train set within tens of steps and reaches val 0.9
    hundreds of steps later, but never settles: val accuracy oscillates after the first crossing, so which
    seeds cross by a given step moves with float rounding. Measured (3 seeds, init 1): val 0.9 first at
    534, 318, 396; the test asks for 2 of 3 by step 800."""
    raw = {
        "task": {"name": "modular", "op": "add", "p": 23, "train_fraction": 0.5},
        "model": {"name": "quadratic", "width": 200, "head": "classification"},
        "optim": {"default": {"name": "normalized_gd", "lr": 4.0, "weight_decay": 3e-4}},
        "train": {"steps": 800},
        "phases": {"budget": 800, "gap": 100},
        "seeds": [0, 1, 2],
    }
    spec = build_spec(raw)
    trainer = make_trainer(spec.trials())
    trainer.run()
    results = trainer.results()
    assert all(r.step_train is not None and r.step_train < 50 for r in results)
    grokked = [r for r in results if r.phase == "grokking" and r.step_val <= 800]
    assert len(grokked) >= 2, [(r.phase, r.step_val) for r in results]


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
