"""`train.capture: compiled` (issue 50): the captured step computes what the eager step computes.

Every gradient-trained family and every de-grokking method, in a pack whose members stop at different steps (one
by its own budget, others as their phase is decided or they diverge), compared member by member with the eager
reference: after one step the parameters agree to 1e-5, and after the whole run the phases, crossings, stops
and accuracy curves agree (accuracies to 1e-3). float64, so what is compared is the arithmetic, not float32's
rounding order (benchmarks/README.md). The module compiles each family once or twice: ~80 s on 2 cores
(COMPILED_IN_CI says what CI runs).
"""

import pytest
import torch
from test_model_contract import FAMILIES, example
from test_pack import BASE, MEMBERS, configs

from grokray.capture import Captured, capture_mode
from grokray.engine import PackTrainer, make_trainer

GRADIENT_FAMILIES = [name for name in FAMILIES if isinstance(make_trainer([example(name)]), PackTrainer)]
# Each method switched on for the toy pack of test_pack (mixed widths, fractions, lrs, seeds; one stops at 120).
METHODS = {
    "grokfast-ema": ["optim.default.grad_filter=ema", "optim.default.filter_lambda=2.0"],
    "grokfast-ma": ["optim.default.grad_filter=ma", "optim.default.filter_window=20"],
    "orthogonal": ["optim.default.orthogonal=true"],
    "weight-norm": ["train.weight_norm=initial"],
    "stablemax": ["train.softmax=stablemax"],
    "muon": ["optim.default.name=muon", "optim.default.momentum=0.95", "optim.default.lr=1e-3"],
}


def family_pack(name, capture):
    """Three members of the family's example: two run 200 steps, one stops at its own budget of 70."""
    common = ["train.dtype=float64", "train.steps=200", "phases.budget=200", f"train.capture={capture}"]
    return [example(name, *common), example(name, *common, "seeds=[1]", "train.steps=70", "phases.budget=70"),
            example(name, *common, "seeds=[2]")]


def method_pack(method, capture):
    toy = {**BASE, "optim": {"default": {"name": "adamw", "lr": 3e-3}}}
    return [build(toy, [*over, *METHODS[method], f"train.capture={capture}"]) for over in MEMBERS]


def build(raw, overrides):
    from grokray.spec.build import build_spec

    return build_spec(raw, overrides).first_trial()


def assert_captured_equals_eager(make_pack):
    eager, captured = (PackTrainer(make_pack(mode)) for mode in ("eager", "compiled"))
    assert captured.capture == "compiled" and eager.capture == "eager"
    for trainer in (eager, captured):
        trainer.run(until=1)
    for group, flat in eager.model.flat.items():
        per_member = (flat - captured.model.flat[group]).abs().amax(1)
        assert per_member.max().item() <= 1e-5, (group, per_member.tolist())
    for trainer in (eager, captured):
        trainer.run()
    assert not captured.forward.failed, "the captured forward fell back to eager"
    stops = set()
    for a, b in zip(eager.results(), captured.results(), strict=True):
        assert (a.phase, a.step_train, a.step_val, a.steps_run) == (b.phase, b.step_train, b.step_val, b.steps_run)
        assert a.curve["step"] == b.curve["step"]
        for key in ("train/acc", "val/acc"):
            x, y = (torch.tensor([float("nan") if v is None else v for v in r.curve[key]]) for r in (a, b))
            assert torch.allclose(x, y, atol=1e-3, rtol=0, equal_nan=True), key
        stops.add(a.steps_run)
    assert len(stops) > 1, f"every member stopped at the same step {stops}: nothing stopped midway"


# Issue 69, for CI's 45 minutes: CI compiles the toy (whose graphs the method packs reuse: orthogonal, weight-norm and
# Grokfast-MA then cost about 1 s each) and the user's module family; each other family or method compiles graphs
# of its own (5-34 s each on 2 cores, 90 s together) and runs in `make test-slow`, for a change to grokray/capture.py
# or to that family's forward. The transformer's (29 s, the longest compile) runs in make library.
COMPILED_IN_CI = {"toy", "module", "orthogonal", "weight-norm", "grokfast-ma"}


def tier(name):
    if name == "transformer":
        return pytest.param(name, marks=pytest.mark.library)
    return name if name in COMPILED_IN_CI else pytest.param(name, marks=pytest.mark.slow(
        reason="compiles graphs of its own (5-34 s); the toy and module captures stay in CI"))


@pytest.mark.parametrize("name", [tier(n) for n in GRADIENT_FAMILIES])
def test_the_captured_step_equals_the_eager_step_for_every_family(name):
    assert_captured_equals_eager(lambda mode: family_pack(name, mode))


@pytest.mark.parametrize("method", [tier(m) for m in METHODS])
def test_the_captured_step_equals_the_eager_step_for_every_degrokking_method(method):
    assert_captured_equals_eager(lambda mode: method_pack(method, mode))


def test_a_captured_pack_compacts_as_the_eager_one():
    """Stopped members are masked (lr 0) until a quarter of the pack has stopped, then cut out, as in eager, and
    the compiled code runs on at each new size."""
    budgets = [30, 40, 50, 60, 150, 150, 150, 150]

    def pack(mode):
        return [build(BASE, [f"train.steps={b}", f"phases.budget={b}", f"seeds=[{i}]", f"train.capture={mode}"])
                for i, b in enumerate(budgets)]

    shapes, results = {}, {}
    for mode in ("eager", "compiled"):
        trainer = PackTrainer(pack(mode))
        seen = [trainer.K]
        trainer.run(on_check=lambda t, seen=seen: seen.append(t.K) if t.K != seen[-1] else None)
        shapes[mode], results[mode] = seen, trainer.results()
    assert shapes == {"eager": [8, 6, 4], "compiled": [8, 6, 4]}
    for a, b in zip(results["eager"], results["compiled"], strict=True):
        assert (a.phase, a.step_train, a.step_val, a.steps_run) == (b.phase, b.step_train, b.step_val, b.steps_run)
    assert [r.steps_run for r in results["compiled"]] == budgets


def test_auto_picks_the_measured_mode_per_device_and_an_explicit_mode_wins():
    assert capture_mode("auto", torch.device("cpu")) == "eager"
    assert capture_mode("compiled", torch.device("cpu")) == "compiled"
    assert PackTrainer(configs(MEMBERS[:1])).capture == "eager"


def test_a_function_the_compiler_cannot_take_runs_eagerly_and_is_said_once(capsys):
    def step(x):
        return x.sum() * 2

    wrapped = Captured(step, "a test function")
    wrapped.compiled = lambda *a: (_ for _ in ()).throw(RuntimeError("cannot capture"))
    x = torch.ones(3)
    assert wrapped(x).item() == step(x).item() and wrapped(x).item() == 6.0
    assert wrapped.failed
    err = capsys.readouterr().err
    assert err.count("could not compile a test function") == 1 and "runs eagerly" in err


def test_the_compiler_settings_adapter_still_finds_torchs_settings():
    """grokray.capture.configure_compiler is the one use of torch._dynamo.config: this fails by name if torch renames
    recompile_limit or force_parameter_static_shapes (then look for their public replacements)."""
    from grokray.capture import RECOMPILE_LIMIT, configure_compiler

    configure_compiler()
    assert torch._dynamo.config.recompile_limit >= RECOMPILE_LIMIT
    assert torch._dynamo.config.force_parameter_static_shapes is False
