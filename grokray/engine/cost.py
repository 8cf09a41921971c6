"""What a pack step costs on this machine, measured: seconds per step = a + b * K for K members still training.

The cost of a step depends on the family, its shapes (p, widths, sequence length, the number of training rows for
the transformer's split step and for RFM's kernel solve), the pack size and the machine, so no single
model-steps/s figure serves (one figure said 0.0 min for an RFM sweep whose iterations take seconds). A short
calibration trains the real pack for a fraction of a second: once with all its members, once with its first
member alone. That gives the per-step overhead a (launches, the optimizer's fixed work) and the per-member cost b,
so a pack that sheds classified members is costed at the size it shrinks to.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .sizing import usable_threads
from .trainers import make_trainer


@dataclass(frozen=True)
class StepCost:
    a: float  # seconds per step whatever the pack size
    b: float  # seconds per step per member

    def seconds(self, k: int) -> float:
        return self.a + self.b * k


def step_seconds(configs: list, device: str = "cpu", min_seconds: float = 0.25, warmup_s: float = 0.15) -> float:
    """Seconds per training step of a pack of `configs`: steps for `warmup_s` first (the first steps fault in the
    activations' pages and run 30% slower), then timed over >= min_seconds, or one step, whichever is longer (an
    RFM iteration at p = 61 takes about a second)."""
    trainer = make_trainer(configs, device=device)
    t0 = time.perf_counter()
    trainer.run(until=1)
    first = time.perf_counter() - t0
    if first >= min_seconds and not trainer.done():
        # Either a slow step (an RFM iteration) or a process's first step paying one-time start-up (thread pools,
        # kernels: a fresh atlas process estimated the 1.5 min quickstart at "31 min"). A second
        # step tells them apart.
        t1 = time.perf_counter()
        trainer.run(until=2)
        second = time.perf_counter() - t1
        if second >= min_seconds:
            return second
        t0 = time.perf_counter() - second  # go on timing from the warm second step
    while time.perf_counter() - t0 < warmup_s and not trainer.done():
        trainer.run(until=trainer.step + 1)
    warm = (time.perf_counter() - t0) / max(trainer.step, 1)  # if the pack ends before the timed window
    steps, elapsed, chunk = 0, 0.0, 1
    while elapsed < min_seconds and not trainer.done():
        start_step, t1 = trainer.step, time.perf_counter()
        trainer.run(until=trainer.step + chunk)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        elapsed += time.perf_counter() - t1
        steps += trainer.step - start_step
        chunk = min(chunk * 2, 64)
        if trainer.step == start_step:  # the pack ended (every member classified) before the window closed
            break
    return elapsed / steps if steps else warm


def calibrate(configs: list, device: str = "cpu", threads: int = 1, min_seconds: float = 0.25) -> StepCost:
    """Measure a pack's StepCost with `threads` torch threads (what its Tune trial gets: resources.cpu)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(usable_threads(threads))
    try:
        full = step_seconds(configs, device, min_seconds)
        if len(configs) == 1:
            return StepCost(0.0, full)
        one = step_seconds(configs[:1], device, min_seconds)
    finally:
        torch.set_num_threads(saved)
    b = max(0.0, (full - one) / (len(configs) - 1))
    return StepCost(max(0.0, full - b * len(configs)), b)
