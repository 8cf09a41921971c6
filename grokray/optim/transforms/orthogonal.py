"""⊥Grad (Prieto et al. 2025, "Grokking at the Edge of Numerical Stability", arXiv 2501.04697): remove each
parameter tensor's gradient component along its own weights, then give it back the gradient's norm, so the loss
cannot fall by scaling the weights (the logits) alone. Per member: a pack may hold members with and without it."""

from __future__ import annotations

from .base import GradTransform, Setting, register

TINY = 1e-30  # keeps a zero weight or a zero gradient from dividing by zero
ORTHOGONAL = Setting("orthogonal", bool, False, doc="⊥Grad: each tensor's gradient without its component along "
                     "the weights")


def orthogonalize_(param, grad, segments, on) -> None:
    """g <- (g - (w.g / w.w) w) * |g| / |g - (w.g / w.w) w| per parameter tensor (each `segments` slice of the
    flat group), for the members where `on` [K, 1] is 1."""
    for start, stop, *_ in segments:
        w, g = param[:, start:stop], grad[:, start:stop]
        along = (w * g).sum(1, keepdim=True) / ((w * w).sum(1, keepdim=True) + TINY)
        ortho = g - along * w
        ortho.mul_(g.norm(dim=1, keepdim=True) / (ortho.norm(dim=1, keepdim=True) + TINY))
        g.add_((ortho - g) * on)


class Orthogonal:
    """Stateless: the segments it projects on."""

    def __init__(self, grad, configs, segments):
        self.segments = segments

    def apply_(self, param, grad, h):
        orthogonalize_(param, grad, self.segments, h["orthogonal"])

    def select(self, idx):
        pass

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


register(GradTransform("orthogonal", ORTHOGONAL, True, (), Orthogonal, order=0))
