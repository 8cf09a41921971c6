"""Grokfast-MA (Lee et al. 2024, arXiv 2405.20233): g <- g + lambda * g_slow, where g_slow is the mean of the last
`window` gradients; no amplification until the window is full, as in the authors' default."""

from __future__ import annotations

import torch

from .base import GradTransform, Setting, register
from .grokfast_ema import FILTER, LAMBDA

WINDOW = Setting("filter_window", int, 100, per_member=False, bounds={"ge": 1, "le": 10_000},
                 doc="ma: g_slow is the mean of the last `window` gradients")


class MAFilter:
    def __init__(self, grad: torch.Tensor, configs, segments):
        self.window = configs[0].filter_window  # the pack's: the ring's length
        self.seen = 0
        self.slow = torch.zeros_like(grad)  # the running sum of the ring
        self.ring = torch.zeros((grad.shape[0], self.window, grad.shape[1]), dtype=grad.dtype, device=grad.device)

    def apply_(self, param, grad, h):
        slot = self.seen % self.window
        if self.seen >= self.window and slot == 0:  # re-add the sum once a window: no drift from subtracting
            self.slow.copy_(self.ring.sum(1))
        self.slow.sub_(self.ring[:, slot]).add_(grad)
        self.ring[:, slot] = grad
        if self.seen + 1 >= self.window:
            grad.addcmul_(self.slow, h["filter_lambda"] / self.window)
        self.seen += 1

    def select(self, idx):
        self.slow = self.slow.index_select(0, idx)
        self.ring = self.ring.index_select(0, idx)

    def state_dict(self):
        return {"seen": self.seen, "slow": self.slow.clone(), "ring": self.ring.clone()}

    def load_state_dict(self, state):
        self.seen = int(state["seen"])
        self.slow.copy_(state["slow"])
        self.ring.copy_(state["ring"])


register(GradTransform("grokfast_ma", FILTER, "ma", (LAMBDA, WINDOW), MAFilter, lambda cfg: 1 + cfg.filter_window,
                       order=1, state_key="filter"))
