"""Optimizer building blocks on flat, stacked tensors.

Every parameter group is one [K, P] tensor (models/base.py) and every hyperparameter one [K, 1] column, so a
single configuration is simply K = 1: the packed and unpacked optimizers are the same code and cannot drift
apart. All primitives work in place or into a caller-owned scratch buffer. On a CPU the update of a small model
is memory-bound, and fresh temporaries of the parameter size (allocated, page-faulted, freed every step) cost
more than the arithmetic.
"""

from __future__ import annotations

import torch


def fused_adam_kernel(decoupled: bool):
    """torch's fused Adam (coupled L2) or AdamW (decoupled) step over lists of tensors, with the hyperparameters
    given per call. The only use of a private torch API in grokray: torch 2.13 has no public functional fused Adam
    (torch.optim.Adam(fused=True) takes one hyperparameter set per param group, a pack needs one per member row).
    tests/test_optim.py fails by name if torch renames or drops them."""
    return torch._fused_adamw_ if decoupled else torch._fused_adam_


def warmup_factor(step: int, warmup_steps, from_zero: bool = False):
    """Linear warm-up of update `step` (0-based): (step + 1) / warmup, or step / warmup from_zero (the first update
    has lr 0), capped at 1; 1 where warmup_steps is 0. A tensor of factors for a tensor of warm-ups (the members'
    column), a float for one member's int."""
    ramp = step if from_zero else step + 1
    if isinstance(warmup_steps, torch.Tensor):
        return torch.where(warmup_steps > 0, (ramp / warmup_steps.clamp(min=1)).clamp(max=1.0), 1.0)
    return min(ramp / warmup_steps, 1.0) if warmup_steps > 0 else 1.0


def add_l2_(grad: torch.Tensor, param: torch.Tensor, weight_decay: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Coupled L2 (SGD, Adam, GD, Langevin): out = grad + wd * param."""
    return torch.mul(param, weight_decay, out=out).add_(grad)


def decoupled_decay_(param: torch.Tensor, lr: torch.Tensor, weight_decay: torch.Tensor) -> None:
    """AdamW's decay: shrink the weights directly, independent of the adaptive scaling."""
    param.mul_(1 - lr * weight_decay)


def adam_moments_(grad, exp_avg, exp_avg_sq, beta1, beta2, scratch) -> None:
    """m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2  (as lerps: no temporaries)."""
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.lerp_(torch.mul(grad, grad, out=scratch), 1 - beta2)


def adam_direction_(exp_avg, exp_avg_sq, step, beta1, beta2, eps, out) -> torch.Tensor:
    """Bias-corrected m_hat / (sqrt(v_hat) + eps), written into `out`."""
    torch.div(exp_avg_sq, 1 - beta2**step, out=out).sqrt_().add_(eps)
    return torch.div(exp_avg, out, out=out).div_(1 - beta1**step)


def momentum_(grad, buffer, momentum) -> torch.Tensor:
    """Heavy-ball momentum (buffer updated in place); momentum 0 is plain gradient descent."""
    return buffer.mul_(momentum).add_(grad)


def normalize_(grad, out, eps: float = 1e-12) -> torch.Tensor:
    """Normalized GD ("Why do you grok", appendix A): each member's step scaled by 1/||grad||."""
    return torch.div(grad, grad.norm(dim=1, keepdim=True).add_(eps), out=out)


def langevin_kick_(param, lr, temperature, noise) -> None:
    """param += sqrt(2 lr T) * xi: the Langevin step's thermal noise (`noise` is standard normal)."""
    param.add_(noise.mul_((2 * lr * temperature).sqrt()))


NEWTON_SCHULZ = (3.4445, -4.7750, 2.0315)  # Muon's quintic iteration (Jordan et al.): steep at zero, 5 steps


def newton_schulz(m: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """Muon's orthogonalisation of each member's matrix, [K, r, c] -> about U V^T (singular values near 1, not
    exactly), computed on the shorter side."""
    a, b, c = NEWTON_SCHULZ
    tall = m.shape[1] > m.shape[2]
    x = m.transpose(1, 2) if tall else m
    x = x / torch.linalg.vector_norm(x, dim=(1, 2), keepdim=True).clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.transpose(1, 2)
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.transpose(1, 2) if tall else x
