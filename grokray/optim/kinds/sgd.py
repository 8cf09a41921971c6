"""SGD with heavy-ball momentum and coupled L2."""

from __future__ import annotations

import torch

from .. import primitives as P
from .base import OptimizerKind, register


def _sgd(p, g, s, lr, h, st, step, noise, matrices):
    d = P.momentum_(P.add_l2_(g, p, h["weight_decay"], s), st["momentum"], h["momentum"])
    p.sub_(torch.mul(d, lr, out=s))


register(OptimizerKind("sgd", _sgd, state=("momentum",), reads=("momentum",)))
