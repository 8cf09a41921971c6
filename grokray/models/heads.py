"""Output heads: how a model's raw output becomes a per-sample loss and a per-sample correctness.

Shared by every family so that "accuracy" means the same thing in every phase diagram.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class ClassificationHead:
    """Cross-entropy over `num_classes` logits; correct = argmax."""

    def __init__(self, num_classes: int):
        self.out_dim = num_classes

    def per_sample(self, out, y):
        loss = F.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="none").view(y.shape)
        return loss, out.argmax(-1) == y


class OneHotMSEHead:
    """MSE to one-hot targets (Omnigrok's image MLP, Gromov's quadratic regression); correct = argmax."""

    def __init__(self, num_classes: int):
        self.out_dim = num_classes

    def per_sample(self, out, y):
        target = F.one_hot(y, self.out_dim).to(out.dtype)
        return (out - target).pow(2).sum(-1), out.argmax(-1) == y


class TargetVectorHead:
    """Liu's regression: each class has a fixed random target vector; correct = nearest target.

    `targets` is [K, C, D]: every member draws its own vectors from its own seed.
    """

    def __init__(self, targets: torch.Tensor):
        self.targets = targets
        self.out_dim = targets.shape[-1]

    def per_sample(self, out, y):
        goal = torch.gather(self.targets, 1, y.unsqueeze(-1).expand(-1, -1, self.out_dim))
        loss = (out - goal).pow(2).mean(-1)
        nearest = torch.cdist(out, self.targets).argmin(-1)
        return loss, nearest == y


def target_vectors(gen: torch.Generator, num_classes: int, dim: int) -> torch.Tensor:
    return torch.randn((num_classes, dim), generator=gen, dtype=torch.float64)
