"""The weight-norm constraint (Liu et al. 2023, "Omnigrok: Grokking Beyond Algorithmic Data", arXiv 2210.01117):
after every update each member's total weight norm is rescaled to its target (its initial norm, or a given one),
on packed [K, P] groups. It acts after the update, over all of a member's groups at once; the methods that rewrite
a group's gradient before the update are the gradient transforms (optim/transforms/)."""

from __future__ import annotations

import torch

TINY = 1e-30  # keeps a zero norm from dividing by zero


def hold_weight_norm_(flats: list[torch.Tensor], norm: torch.Tensor, target: torch.Tensor,
                      moving: torch.Tensor) -> None:
    """Rescale each member's weights, over all its groups, from their total norm `norm` [K] to `target` [K] (NaN: no
    constraint), where `moving` [K] says it may change (a stopped member keeps its weights to the bit)."""
    held = moving & ~torch.isnan(target)
    scale = torch.where(held, target / (norm + TINY), torch.ones_like(norm)).to(flats[0].dtype).view(-1, 1)
    for f in flats:
        f.mul_(scale)
