"""Shared stacked layers: the one-hot-free first layer on a full symbol table, and the square activation."""

import pytest
import torch

from grokray.engine import PackTrainer
from grokray.models.layers import ACTIVATIONS, encode_inputs, linear, table_linear, table_ranges
from grokray.spec.build import build_spec

TASKS = {
    "modular add": {"name": "modular", "op": "add", "p": 7},
    "modular div (b from 1)": {"name": "modular", "op": "div", "p": 7},
    "permutations S3": {"name": "permutation", "n": 3},
}


def task_data(task):
    raw = {"task": {**task, "train_fraction": 0.5}, "model": {"name": "quadratic", "width": 8}}
    return build_spec(raw).first_trial().task.data()


@pytest.mark.parametrize("task", TASKS.values(), ids=TASKS.keys())
@pytest.mark.parametrize("bias", [False, True])
def test_table_linear_equals_the_one_hot_matmul_and_its_gradient(task, bias):
    data = task_data(task)
    ranges = table_ranges(data.x)
    assert ranges is not None
    K, width, gen = 3, 5, torch.Generator().manual_seed(0)
    w = torch.randn((K, 2 * data.vocab_size, width), generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn((K, width), generator=gen, dtype=torch.float64, requires_grad=True) if bias else None
    x = data.x.expand(K, -1, -1)
    g = torch.randn((K, len(data.x), width), generator=gen, dtype=torch.float64)

    fast = table_linear(ranges, data.vocab_size, w, b)
    slow = linear(encode_inputs(x, data.vocab_size, torch.float64), w, b)
    assert fast.shape == slow.shape == (K, len(data.x), width)
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-14)
    params = [w] if b is None else [w, b]
    for gf, gs in zip(torch.autograd.grad(fast, params, g), torch.autograd.grad(slow, params, g), strict=True):
        torch.testing.assert_close(gf, gs, rtol=0, atol=1e-12)


def test_table_ranges_refuses_anything_but_the_whole_table_in_order():
    add = task_data({"name": "modular", "op": "add", "p": 5}).x
    assert table_ranges(add) == [(0, 5), (0, 5)]
    assert table_ranges(task_data({"name": "modular", "op": "div", "p": 5}).x) == [(0, 5), (1, 4)]
    assert table_ranges(add.flip(0)) is None  # same rows, other order
    assert table_ranges(add[:-1]) is None  # a row missing
    liu = build_spec({"task": {"name": "addition", "p": 5}, "model": {"name": "toy"}}).first_trial().task.data()
    assert table_ranges(liu.x) is None  # unordered pairs a <= b only
    assert table_ranges(torch.randn(25, 2)) is None  # features, not symbols


@pytest.mark.parametrize("model", [{"name": "quadratic", "width": 16}, {"name": "mlp", "width": 16, "depth": 3}])
def test_joint_training_takes_the_table_path_and_matches_the_one_hot_forward(model):
    raw = {"task": {"name": "modular", "p": 7, "train_fraction": 0.6}, "model": model, "train": {"dtype": "float64"}}
    trainer = PackTrainer([build_spec(raw, [f"seeds=[{s}]"]).first_trial() for s in (0, 1)])
    assert trainer.joint
    x, _ = trainer.all_points()
    net = trainer.model
    fast = net(x)
    assert net.is_full_table(x)
    batch = x[:, :-1]  # not the whole table: the one-hot path
    assert not net.is_full_table(batch)
    torch.testing.assert_close(fast[:, :-1], net(batch), rtol=0, atol=1e-12)


def test_square_activation_matches_torch_square_with_its_gradient():
    x = torch.randn((4, 6, 3), dtype=torch.float64, requires_grad=True)
    g = torch.randn_like(x)
    y = ACTIVATIONS["square"](x)
    torch.testing.assert_close(y, torch.square(x), rtol=0, atol=0)
    (gx,) = torch.autograd.grad(y, x, g)
    torch.testing.assert_close(gx, 2 * x.detach() * g, rtol=0, atol=1e-15)


FAULT_PROBE = """
import resource, sys, torch
from grokray.engine.memory import keep_freed_memory
torch.set_num_threads(1)
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def step():  # a training step's pattern: several multi-MB activations made, used and freed
    a = torch.ones((32, 529, 64))
    b = a * a
    c = b + a
    return float((c * b).sum())
for _ in range(5):  # the heap settles into its steady layout
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(60):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 1058)  # pages in one 4.3 MB buffer
"""


def _buffers_faulted(mode: str) -> float:
    """Run the probe in a fresh process, so other tests' threads and heap add no faults of their own. glibc's
    mmap threshold starts at 128 KiB and then adapts to the sizes freed, so how many buffers the defaults hand back
    depends on the heap's history (3 or 238 in 60 steps across runs here); the environment pins that starting
    threshold in both processes, which makes the control deterministic and shows that mallopt overrides it."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 << 10)}
    out = subprocess.run([sys.executable, "-c", FAULT_PROBE, mode], capture_output=True, text=True, check=True,
                         env=env)
    return float(out.stdout.strip())


def test_cpu_trainers_keep_freed_activation_buffers_instead_of_faulting_them_in_every_step():
    import sys

    if not sys.platform.startswith("linux"):
        pytest.skip("glibc's mallopt only")
    assert _buffers_faulted("default") > 30  # a 128 KiB threshold hands the buffers back: re-faulted every step
    assert _buffers_faulted("keep") < 10  # kept: 0-2 in 60 steps
