"""Run one configuration to its phase: the function everything else in grokray is built on."""

from __future__ import annotations

from .result import MemberResult
from .trainers import make_trainer


def run_trial(config, device: str = "cpu") -> MemberResult:
    """Train `config` until its phase is decided (or its steps run out) and return curve and phase."""
    trainer = make_trainer([config], device=device)
    trainer.run()
    return trainer.results()[0]
