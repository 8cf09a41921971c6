"""The field's de-grokking methods, on packed [K, P] tensors with per-member [K, 1] settings.

- Grokfast (Lee et al. 2024): amplify the slow part of the gradient, g <- g + lambda * g_slow, where g_slow is an
  exponential moving average of the gradients (EMA: g_slow <- alpha * g_slow + (1 - alpha) * g, started at the
  first gradient) or the mean of the last `window` gradients (MA: no amplification until the window is full, as
  in the authors' default).
- ⊥Grad (Prieto et al. 2025): remove each parameter tensor's gradient component along its own weights, then give
  it back the gradient's norm, so the loss cannot fall by scaling the weights (the logits) alone.
- The weight-norm constraint (Liu et al. 2023, Omnigrok): after every update each member's total weight norm is
  rescaled to its target (its initial norm, or a given one).

Each acts on a member only where its own setting asks for it, so a pack can hold members with and without it.
"""

from __future__ import annotations

import torch

TINY = 1e-30  # keeps a zero weight or a zero gradient from dividing by zero


class GradFilter:
    """Grokfast's filter over one parameter group: `kind` "ema" or "ma" (the pack's), alpha and lambda [K, 1]."""

    def __init__(self, kind: str, grad: torch.Tensor, window: int):
        self.kind, self.window = kind, window
        self.seen = 0  # gradients filtered so far (every member steps together)
        self.slow = torch.zeros_like(grad)  # ema: the average; ma: the running sum of the ring
        if kind == "ma":  # the last `window` gradients of each member
            self.ring = torch.zeros((grad.shape[0], window, grad.shape[1]), dtype=grad.dtype, device=grad.device)

    def apply_(self, grad: torch.Tensor, alpha: torch.Tensor, lam: torch.Tensor) -> None:
        if self.kind == "ema":
            if self.seen == 0:
                self.slow.copy_(grad)
            else:
                self.slow.lerp_(grad, 1 - alpha)  # alpha * slow + (1 - alpha) * g, in place
            grad.addcmul_(self.slow, lam)
        else:
            slot = self.seen % self.window
            if self.seen >= self.window and slot == 0:  # re-add the sum once a window: no drift from subtracting
                self.slow.copy_(self.ring.sum(1))
            self.slow.sub_(self.ring[:, slot]).add_(grad)
            self.ring[:, slot] = grad
            if self.seen + 1 >= self.window:
                grad.addcmul_(self.slow, lam / self.window)
        self.seen += 1

    def select(self, idx: torch.Tensor) -> None:
        self.slow = self.slow.index_select(0, idx)
        if self.kind == "ma":
            self.ring = self.ring.index_select(0, idx)

    def state_dict(self) -> dict:
        out = {"seen": self.seen, "slow": self.slow.clone()}
        if self.kind == "ma":
            out["ring"] = self.ring.clone()
        return out

    def load_state_dict(self, state: dict) -> None:
        self.seen = int(state["seen"])
        self.slow.copy_(state["slow"])
        if self.kind == "ma":
            self.ring.copy_(state["ring"])


def orthogonalize_(param: torch.Tensor, grad: torch.Tensor, segments: list[tuple], on: torch.Tensor) -> None:
    """⊥Grad per parameter tensor (each `segments` slice of the flat group), for the members where `on` [K, 1]
    is 1: g <- (g - (w.g / w.w) w) * |g| / |g - (w.g / w.w) w|."""
    for start, stop, *_ in segments:
        w, g = param[:, start:stop], grad[:, start:stop]
        along = (w * g).sum(1, keepdim=True) / ((w * w).sum(1, keepdim=True) + TINY)
        ortho = g - along * w
        ortho.mul_(g.norm(dim=1, keepdim=True) / (ortho.norm(dim=1, keepdim=True) + TINY))
        g.add_((ortho - g) * on)


def hold_weight_norm_(flats: list[torch.Tensor], norm: torch.Tensor, target: torch.Tensor,
                      moving: torch.Tensor) -> None:
    """Rescale each member's weights, over all its groups, from their total norm `norm` [K] to `target` [K] (NaN: no
    constraint), where `moving` [K] says it may change (a stopped member keeps its weights to the bit)."""
    held = moving & ~torch.isnan(target)
    scale = torch.where(held, target / (norm + TINY), torch.ones_like(norm)).to(flats[0].dtype).view(-1, 1)
    for f in flats:
        f.mul_(scale)
