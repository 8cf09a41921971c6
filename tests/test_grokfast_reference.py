"""The Grokfast benchmark as published (issue 51), trained by grokray on the CPU from the published specs
themselves (sweeps/grokfast_ma.yaml, grokfast_ema.yaml): the authors' model, their epoch batches, Adam with their
betas and warm-up from lr 0, val measured every epoch (10 steps), and the init, split and shuffles drawn as their
script draws them after torch.manual_seed(seed) (train.seed_stream: script), so grokray's seed 0 is theirs.

The paper reports one run per method: Grokfast-MA reaches 95 % val at step 790, EMA at 910. A plain-torch loop
written here from the facts of the authors' code (benchmarks/README.md) gives 790 and 910 at seed 0 on this CPU,
and MA 900 and 1,050, EMA 1,340 and 910 at seeds 1 and 2. The seed-0 test of MA (one member, 108 s on a loaded
2-core host, 2026-11-29) runs in `make library`; EMA's seed 0 and the seeds 1-2 tests are slow (`make test-slow`):
CI had run past its 60 minutes.
"""

from pathlib import Path

import pytest
import yaml

from grokray.engine import PackTrainer
from grokray.spec.build import build_spec

SWEEPS = Path(__file__).resolve().parent.parent / "sweeps"
# The step to 95 % val the authors' loop gave at each seed (seed 0's is the paper's figure).
AUTHORS_LOOP = {"ma": {0: 790, 1: 900, 2: 1050}, "ema": {0: 910, 1: 1340, 2: 910}}


def steps_to_95(method: str, seeds: list[int]) -> list[int | None]:
    """Each seed's step to 95 % val under the published spec's own setting (its optim.default), packed."""
    raw = yaml.safe_load((SWEEPS / f"grokfast_{method}.yaml").read_text())
    configs = [build_spec(raw, [f"seeds=[{s}]", "train.steps=3000", "phases.budget=3000"]).first_trial()
               for s in seeds]
    trainer = PackTrainer(configs)
    trainer.run()
    return [r.step_val for r in trainer.results()]


@pytest.mark.library
@pytest.mark.parametrize("method", ["ma", pytest.param("ema", marks=pytest.mark.slow(
    reason="the same loop as MA's, a minute more; MA's stays in make library"))])
def test_the_published_setting_reaches_95_percent_at_the_papers_step_at_seed_0(method):
    (step,) = steps_to_95(method, [0])
    published = AUTHORS_LOOP[method][0]
    assert step is not None and abs(step - published) <= 0.15 * published, (method, step, published)


@pytest.mark.slow(reason="two seeds of each published setting, minutes; seed 0 of MA runs in make library")
@pytest.mark.parametrize("method", list(AUTHORS_LOOP))
def test_seeds_1_and_2_reach_95_percent_where_the_authors_loop_does(method):
    steps = steps_to_95(method, [1, 2])
    for seed, step in zip([1, 2], steps, strict=True):
        theirs = AUTHORS_LOOP[method][seed]
        assert step is not None and abs(step - theirs) <= 0.15 * theirs, (method, seed, step, theirs)
