"""Run one configuration to its phase: the function everything else in grokray is built on."""

from __future__ import annotations

import time
from collections.abc import Callable

from .result import MemberResult
from .trainers import make_trainer


def run_trial(config, device: str = "cpu", progress: Callable[[int, int, float], None] | None = None,
              every_s: float = 10.0) -> MemberResult:
    """Train `config` until its phase is decided (or its steps run out) and return curve and phase.
    `progress(step, budget, elapsed_s)` is called every `every_s` seconds while it trains (`grokray train`)."""
    trainer = make_trainer([config], device=device)
    if progress is None:
        trainer.run()
        return trainer.results()[0]
    t0 = last = time.monotonic()
    chunk = max(1, config.budget_steps // 100)
    while not trainer.run(until=trainer.step + chunk):
        if time.monotonic() - last >= every_s:
            last = time.monotonic()
            progress(trainer.step, config.budget_steps, last - t0)
    return trainer.results()[0]
