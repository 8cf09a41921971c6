"""Muon (Jordan et al.; Tveit et al. on grokking): each matrix moves along its orthogonalised Nesterov momentum,
scaled by 0.2 sqrt(max(rows, cols)) so that its step has AdamW's RMS and AdamW's lr and decay carry over (Liu et
al. 2025); the group's other tensors (biases, norms; embeddings and head with muon_on: hidden) take AdamW's."""

from __future__ import annotations

from .. import primitives as P
from .adam import MOMENTS
from .base import OptimizerKind, register


def _muon(p, g, s, lr, h, st, step, noise, matrices):
    P.adam_moments_(g, st["exp_avg"], st["exp_avg_sq"], h["beta1"], h["beta2"], s)
    P.decoupled_decay_(p, lr, h["weight_decay"])
    direction = P.adam_direction_(st["exp_avg"], st["exp_avg_sq"], step, h["beta1"], h["beta2"], h["eps"], s)
    buf = P.momentum_(g, st["momentum"], h["momentum"])
    nesterov = g + h["momentum"] * buf
    for a, b, shape, scale in matrices:
        o = P.newton_schulz(nesterov[:, a:b].reshape(-1, *shape))
        direction[:, a:b] = o.reshape(o.shape[0], -1) * scale
    p.sub_(direction.mul_(lr))


register(OptimizerKind("muon", _muon, state=(*MOMENTS, "momentum"), reads=("momentum", "muon_on"), matrices=True))
