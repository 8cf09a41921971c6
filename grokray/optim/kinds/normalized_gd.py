"""Normalized gradient descent (the quadratic model's optimizer): a step of length lr along the gradient."""

from __future__ import annotations

from .. import primitives as P
from .base import OptimizerKind, register


def _normalized_gd(p, g, s, lr, h, st, step, noise, matrices):
    p.sub_(P.normalize_(P.add_l2_(g, p, h["weight_decay"], s), s).mul_(lr))


register(OptimizerKind("normalized_gd", _normalized_gd))
