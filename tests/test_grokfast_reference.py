"""The Grokfast benchmark as published (issue 51), trained by grokray on the CPU: the authors' model (`a op b =`,
the block that normalises its residual stream, GELU, torch's default initialisation, logits over every token),
their batches (shuffled epochs of 512), Adam with their betas and warm-up, val measured every epoch (10 steps).

The paper reports one run per method (Grokfast-MA: 95 % val at step 790; EMA: 910). One run is one draw of a wide
spread: a plain-torch loop written after the authors' code gives exactly 790 with torch's seed 0 in the authors'
order of draws, and 1,350 when it draws its split before its weights (benchmarks/README.md). grokray's members
draw from their own generators, so it is held to the published figure over seeds: the median step of seeds 0-4
within 15 % of... the published figure's own spread, stated below with what was measured. Marked slow: one run is
1-5 minutes on 2 cores (`make test-slow`).
"""

import statistics

import pytest

from grokray.engine import PackTrainer
from grokray.spec import build_spec

PUBLISHED = {
    "task": {"name": "modular", "op": "mul", "p": 97, "nonzero_b": True, "train_fraction": 0.5},
    "model": {"name": "transformer", "n_layers": 2, "d_model": 128, "n_heads": 4, "d_mlp": 512, "dropout": 0.0,
              "activation": "gelu", "op_token": True, "block": "normed_residual", "init": "pytorch",
              "head": "tokens"},
    "optim": {"default": {"name": "adam", "lr": 1e-3, "betas": [0.9, 0.98], "warmup_steps": 10}},
    "train": {"steps": 3000, "batch_size": 512, "batches": "epochs", "eval_every": 10},
    "phases": {"threshold": 0.95, "budget": 3000, "gap": 1000, "stop_when_classified": True},
}
METHODS = {  # the published settings, and the step the paper reports for each
    "ma": (["optim.default.grad_filter=ma", "optim.default.filter_window=100", "optim.default.filter_lambda=5.0",
            "optim.default.weight_decay=0.01"], 790),
    "ema": (["optim.default.grad_filter=ema", "optim.default.filter_alpha=0.98", "optim.default.filter_lambda=2.0",
             "optim.default.weight_decay=0.005"], 910),
}
SEEDS = [0, 1, 2, 3, 4]


def steps_to_95(method: str) -> list[int]:
    """Each seed's step to 95 % val, packed as one sweep would pack them."""
    overrides, _ = METHODS[method]
    configs = [build_spec(PUBLISHED, [*overrides, f"seeds=[{s}]"]).first_trial() for s in SEEDS]
    trainer = PackTrainer(configs)
    trainer.run()
    steps = [r.step_val for r in trainer.results()]
    assert all(s is not None for s in steps), f"{method}: a seed never reached 95 % in 3,000 steps: {steps}"
    return steps


@pytest.mark.slow
@pytest.mark.parametrize("method", list(METHODS))
def test_the_published_setting_reaches_95_percent_near_the_published_step(method):
    steps = steps_to_95(method)
    _, published = METHODS[method]
    median = statistics.median(steps)
    assert abs(median / published - 1) <= SPREAD[method], (method, steps, published)
