"""Prieto et al. 2025, Fig. 1, as sweeps/prieto_fig1_mlp.yaml publishes it (an MLP of two hidden layers of 200
ReLUs without biases on one-hot(a) + one-hot(b), addition mod 113, 5,107 training pairs, full batch, AdamW lr 0.01
without weight decay, the cross-entropy in float64): softmax cross-entropy fits the training set within tens of
steps and does not generalize (the paper: not in 80,000), while ⊥AdamW, the same optimizer with each tensor's
gradient made orthogonal to its weights, generalizes within a few hundred (the paper: ~300). Checked at the
spec's own setting over a 300-step budget, seeds 0-1 (`make library`; about a minute on 2 cores)."""

from pathlib import Path

import pytest
import yaml

from grokray.engine import PackTrainer
from grokray.spec import build_spec

SPEC = Path(__file__).resolve().parent.parent / "sweeps" / "prieto_fig1_mlp.yaml"


def results(orthogonal: bool):
    raw = yaml.safe_load(SPEC.read_text())
    overrides = ["train.steps=300", "phases.budget=300", "phases.gap=100", "train.softmax=softmax",
                 f"optim.default.orthogonal={str(orthogonal).lower()}"]
    trainer = PackTrainer([build_spec(raw, [*overrides, f"seeds=[{s}]"]).first_trial() for s in (0, 1)])
    trainer.run()
    return trainer.results()


@pytest.mark.library
def test_softmax_memorizes_where_orthogonal_adamw_generalizes():
    plain, orthogonal = results(False), results(True)
    assert [r.phase for r in plain] == ["memorization", "memorization"], plain
    assert all(r.step_train is not None and r.step_train < 100 for r in plain)  # the training set, fitted fast
    assert all(r.step_val is not None and r.step_val <= 300 for r in orthogonal), orthogonal
    assert all(r.phase in ("comprehension", "grokking") for r in orthogonal)
