"""Adam (coupled L2: the decay goes into the gradient the moments see) and AdamW (decoupled decay)."""

from __future__ import annotations

from .. import primitives as P
from .base import OptimizerKind, register


def adam_step_(p, s, lr, h, st, step) -> None:
    """p -= lr * bias-corrected m / (sqrt(v) + eps), from moments already updated."""
    p.sub_(P.adam_direction_(st["exp_avg"], st["exp_avg_sq"], step, h["beta1"], h["beta2"], h["eps"], s).mul_(lr))


def _adamw(p, g, s, lr, h, st, step, noise, matrices):
    P.adam_moments_(g, st["exp_avg"], st["exp_avg_sq"], h["beta1"], h["beta2"], s)
    P.decoupled_decay_(p, lr, h["weight_decay"])
    adam_step_(p, s, lr, h, st, step)


def _adam(p, g, s, lr, h, st, step, noise, matrices):
    g = P.add_l2_(g, p, h["weight_decay"], s)
    P.adam_moments_(g, st["exp_avg"], st["exp_avg_sq"], h["beta1"], h["beta2"], g)
    adam_step_(p, s, lr, h, st, step)


MOMENTS = ("exp_avg", "exp_avg_sq")
register(OptimizerKind("adamw", _adamw, state=MOMENTS, fused_adam="decoupled"))
register(OptimizerKind("adam", _adam, state=MOMENTS, fused_adam="coupled"))
