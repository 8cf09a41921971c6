"""Liu et al.'s toy model: the critical training-set size of toy addition, and S_3 fitting."""

import pytest

from grokray.engine import run_trial
from grokray.spec.build import build_spec

ADDITION = {
    "task": {"name": "addition", "p": 10, "train_size": 45},
    "model": {"name": "toy", "embed_dim": 1, "hidden": [200, 200], "activation": "tanh", "head": "classification"},
    # Liu Fig. 6c plane at its low-lr end: representation lr 1e-3 (the paper's), decoder lr 3e-4, no decay.
    "optim": {"embedding": {"name": "adamw", "lr": 1e-3}, "decoder": {"name": "adamw", "lr": 3e-4}},
    "train": {"steps": 3000},
    "phases": {"budget": 3000, "gap": 1000},
}
# Seeds whose 45-sample split generalizes at these settings (measured: seeds 1, 3, 7 of 0-7 reach val >= 0.9
# within ~510 steps; the others memorize, which is the seed dependence DESIGN.md records for this split).
GENERALIZING_SEEDS = [1, 3, 7]


def run(train_size, seed):
    spec = build_spec(ADDITION, [f"task.train_size={train_size}", f"seeds=[{seed}]"])
    return run_trial(spec.first_trial())


@pytest.mark.parametrize("seed", GENERALIZING_SEEDS)
def test_45_of_55_generalizes_and_11_does_not(seed):
    big = run(45, seed)
    assert big.final["val/acc"] >= 0.9 and big.step_val is not None
    assert big.phase in ("comprehension", "grokking")
    small = run(11, seed)  # same budget: 20% of the data is below Liu's critical fraction (~0.4)
    assert small.step_val is None and small.final["val/acc"] < 0.9
    assert small.phase == "memorization"


def test_s3_permutation_fits_training_set():
    raw = {
        "task": {"name": "permutation", "n": 3, "train_fraction": 0.8},
        "model": {"name": "toy", "embed_dim": 9, "hidden": [64, 64], "head": "regression"},  # 3x3 matrix embeddings
        "optim": {"default": {"name": "adamw", "lr": 3e-3}},
        "train": {"steps": 2000},
        "phases": {"budget": 2000, "gap": 500, "stop_when_classified": False},
    }
    result = run_trial(build_spec(raw).first_trial())
    assert result.final["train/acc"] == 1.0
    assert result.step_train is not None and result.step_train < 2000
