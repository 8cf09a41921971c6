"""Grokfast-EMA (Lee et al. 2024, "Grokfast: Accelerated Grokking by Amplifying Slow Gradients", arXiv
2405.20233): g <- g + lambda * g_slow, where g_slow is an exponential moving average of the gradients,
g_slow <- alpha * g_slow + (1 - alpha) * g, started at the first gradient."""

from __future__ import annotations

import torch

from .base import GradTransform, Setting, register

# The field that chooses a Grokfast filter for the pack (none, or a registered filter's name), and the
# amplification both filters read.
FILTER = Setting("grad_filter", str, "none", per_member=False, doc="Grokfast: amplify the gradient's slow part")
LAMBDA = Setting("filter_lambda", float, 2.0, bounds={"ge": 0.0}, doc="ema/ma: g <- g + lambda g_slow")
ALPHA = Setting("filter_alpha", float, 0.98, bounds={"ge": 0.0, "lt": 1.0},
                doc="ema: g_slow <- alpha g_slow + (1 - alpha) g")


class EMAFilter:
    def __init__(self, grad: torch.Tensor, configs, segments):
        self.seen = 0  # gradients filtered so far (every member steps together)
        self.slow = torch.zeros_like(grad)

    def apply_(self, param, grad, h):
        if self.seen == 0:
            self.slow.copy_(grad)
        else:
            self.slow.lerp_(grad, 1 - h["filter_alpha"])  # alpha * slow + (1 - alpha) * g, in place
        grad.addcmul_(self.slow, h["filter_lambda"])
        self.seen += 1

    def select(self, idx):
        self.slow = self.slow.index_select(0, idx)

    def state_dict(self):
        return {"seen": self.seen, "slow": self.slow.clone()}

    def load_state_dict(self, state):
        self.seen = int(state["seen"])
        self.slow.copy_(state["slow"])


register(GradTransform("grokfast_ema", FILTER, "ema", (LAMBDA, ALPHA), EMAFilter, lambda cfg: 1, order=1,
                       state_key="filter"))
