"""Transformer on x + y mod 23 at fraction 0.5: weight decay makes it generalize, no decay leaves it memorizing.

Measured on this 2-core CPU (1 thread): with AdamW lr 1e-2, wd 1, val crosses 0.9 at steps 550, 983, 504 for
seeds 0, 1, 2 (train fits by step ~35); with wd 0 val stays at 0.07-0.43 through 1500 steps.
"""

import pytest

from grokray.engine import run_trial
from grokray.spec import build_spec

BASE = {
    "task": {"name": "modular", "op": "add", "p": 23, "train_fraction": 0.5},
    "model": {"name": "transformer", "n_layers": 1, "d_model": 32, "n_heads": 4, "d_mlp": 128},
    "optim": {"default": {"name": "adamw", "lr": 1e-2, "weight_decay": 1.0, "betas": [0.9, 0.98], "warmup_steps": 10}},
    "train": {"steps": 1200},
    "phases": {"budget": 1200, "gap": 100, "stop_when_classified": True},
}


def run(seed, *overrides):
    return run_trial(build_spec(BASE, [f"seeds=[{seed}]", *overrides]).first_trial())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weight_decay_generalizes(seed):
    r = run(seed)
    assert max(r.curve["train/acc"]) == 1.0  # (at lr 1e-2 train acc later wobbles a little below 1)
    assert r.final["val/acc"] >= 0.9 and r.step_val <= 1200
    assert r.phase == "grokking"  # train fits ~35 steps in; val follows hundreds of steps later


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_weight_decay_short_budget_memorizes(seed):
    r = run(seed, "optim.default.weight_decay=0", "train.steps=600", "phases.budget=600",
            "phases.stop_when_classified=false")
    assert r.final["train/acc"] == 1.0
    assert r.final["val/acc"] < 0.9
    assert r.phase == "memorization"
