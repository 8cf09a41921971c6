"""Optimizer building blocks on stacked tensors.

Every hyperparameter is a [K] tensor (one value per pack member) and every parameter is [K, ...]. A single
configuration is simply K = 1, so the packed and unpacked optimizers are the same code and cannot drift apart.
Each primitive returns a *delta*; `GroupOptimizer` adds it under the member mask, which is how finished or
diverged members stop moving without touching anyone else.
"""

from __future__ import annotations

import torch


def per_member(h: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """View a [K] hyperparameter so it broadcasts against a [K, ...] parameter."""
    return h.view(-1, *([1] * (like.dim() - 1)))


def warmup_factor(step: int, warmup_steps: torch.Tensor) -> torch.Tensor:
    """Linear warmup: (step + 1) / warmup for the first `warmup` steps, then 1."""
    return torch.clamp((step + 1) / warmup_steps.clamp(min=1), max=1.0)


def l2_gradient(grad, param, weight_decay):
    """Coupled L2 (SGD, Adam, GD, Langevin): the decay enters the gradient."""
    return grad + per_member(weight_decay, param) * param


def decoupled_decay(param, lr, weight_decay):
    """AdamW's decay: shrink the weights directly, independent of the adaptive scaling."""
    return -per_member(lr * weight_decay, param) * param


def adam_direction(grad, exp_avg, exp_avg_sq, step: int, beta1, beta2, eps):
    """Update the moments in place and return the bias-corrected Adam direction."""
    b1, b2 = per_member(beta1, grad), per_member(beta2, grad)
    exp_avg.mul_(b1).add_((1 - b1) * grad)
    exp_avg_sq.mul_(b2).add_((1 - b2) * grad * grad)
    corr1 = 1 - b1**step
    corr2 = 1 - b2**step
    return (exp_avg / corr1) / ((exp_avg_sq / corr2).sqrt() + per_member(eps, grad))


def momentum_direction(grad, buffer, momentum):
    """Heavy-ball momentum (buffer updated in place); momentum 0 is plain gradient descent."""
    buffer.mul_(per_member(momentum, grad)).add_(grad)
    return buffer


def normalize_by_global_norm(grads: list[torch.Tensor], eps: float = 1e-12) -> list[torch.Tensor]:
    """Normalized GD ("Why do you grok", appendix A): scale each member's step by 1/||grad||."""
    sq = sum(g.flatten(1).pow(2).sum(1) for g in grads)
    inv = 1.0 / (sq.sqrt() + eps)
    return [g * per_member(inv, g) for g in grads]


def langevin_noise(param, lr, temperature, noise):
    """sqrt(2 * lr * T) * xi: the Langevin step's thermal kick; `noise` is standard normal like param."""
    return per_member((2 * lr * temperature).sqrt(), param) * noise
