"""Langevin dynamics (the two-layer net of the Langevin paper): a gradient step plus Gaussian noise of
temperature T, drawn per member so a member's noise is the same alone or in any pack."""

from __future__ import annotations

from .. import primitives as P
from .base import OptimizerKind, register


def _langevin(p, g, s, lr, h, st, step, noise, matrices):
    p.sub_(P.add_l2_(g, p, h["weight_decay"], s).mul_(lr))
    P.langevin_kick_(p, lr, h["temperature"], noise)


register(OptimizerKind("langevin", _langevin, reads=("temperature",), noise=True))
