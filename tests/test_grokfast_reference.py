"""The Grokfast benchmark as published (issue 51), trained by grokray on the CPU: the authors' model (`a op b =`,
the block that normalises its residual stream, GELU, torch's default initialisation, logits over every token),
their batches (shuffled epochs of 512), Adam with their betas and warm-up, val measured every epoch (10 steps).

The paper reports one run per method (Grokfast-MA: 95 % val at step 790; EMA: 910), and one run is one draw of a
wide spread. A plain-torch loop written here from the facts of the authors' code (benchmarks/README.md) gives
exactly 790 and 910 with torch's seed 0 in the authors' order of draws, and MA 900, 1,050, 1,310 at seeds 1-3,
EMA 1,340 and 910 at seeds 1-2. grokray's members draw from generators of their own, so no grokray seed replays
the authors' seed 0: the published setting is held to that spread instead, by the median of seeds 0-4, within
15 % of the lowest and highest step the authors' loop gave. grokray's variant model (ReLU, pre-LN block,
N(0, 1/d) embeddings, i.i.d. batches) reaches 95 % at 350-365 steps and fails it. Marked slow: five members
trained as one pack take 10-20 minutes on 2 cores (`make test-slow`).
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
# The steps to 95 % the authors' loop gave over its seeds here (the paper's one run among them), per method.
AUTHORS_LOOP = {"ma": (790, 1310), "ema": (910, 1340)}
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
    return [r.step_val if r.step_val is not None else 10**9 for r in trainer.results()]  # never: last in the median


@pytest.mark.slow
@pytest.mark.parametrize("method", list(METHODS))
def test_the_published_setting_reaches_95_percent_near_the_published_step(method):
    steps = steps_to_95(method)
    low, high = AUTHORS_LOOP[method]
    assert 0.85 * low <= statistics.median(steps) <= 1.15 * high, (method, steps, (low, high))
