"""Output heads: how a model's raw output becomes a per-sample loss and a per-sample correctness.

Shared by every family so that "accuracy" means the same thing in every phase diagram.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class Head:
    """Loss and correctness of one output kind. A head with per-member state (its own rows) overrides `select`
    and says `rowwise = False`: its loss of a member's rows needs that member's state, not the rows alone."""

    rowwise = True

    def select(self, idx):
        """The head of the members `idx` (a pack compacting away its finished members)."""
        return self

    def configure(self, train) -> None:
        """Take the loss's train.softmax and train.loss_dtype (checked at parse time: only a cross-entropy has
        them to take)."""


class ClassificationHead(Head):
    """Cross-entropy over `num_classes` logits; correct = argmax. With `stablemax` (train.softmax), the
    probabilities are StableMax's instead of softmax's (Prieto et al. 2025): s(x) = x + 1 for x >= 0 and
    1 / (1 - x) below, normalised over the classes; it grows linearly, not exponentially, with the logits."""

    stablemax = False
    float64 = False  # train.loss_dtype: float64, the softmax cross-entropy of float32 logits computed in float64

    def __init__(self, num_classes: int):
        self.out_dim = num_classes

    def configure(self, train) -> None:
        self.stablemax, self.float64 = train.softmax == "stablemax", train.loss_dtype == "float64"

    def per_sample(self, out, y):
        if self.stablemax:  # in float64, as Prieto et al. compute it: s(x) of a large negative logit underflows
            log_p = log_stablemax(out.double())
            loss = -log_p.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        else:
            logits = out.double() if self.float64 else out
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape)
        return loss, out.argmax(-1) == y


def log_stablemax(x: torch.Tensor) -> torch.Tensor:
    """log of StableMax over the last dimension."""
    s = torch.where(x >= 0, x + 1, 1 / (1 - x.clamp(max=0)))
    return s.log() - s.sum(-1, keepdim=True).log()


class OneHotMSEHead(Head):
    """MSE to one-hot targets (Omnigrok's image MLP, Gromov's quadratic regression); correct = argmax."""

    def __init__(self, num_classes: int):
        self.out_dim = num_classes

    def per_sample(self, out, y):
        target = F.one_hot(y, self.out_dim).to(out.dtype)
        return (out - target).pow(2).sum(-1), out.argmax(-1) == y


class TargetVectorHead(Head):
    """Liu's regression: each class has a fixed random target vector; correct = nearest target.

    `targets` is [K, C, D]: every member draws its own vectors from its own seed.
    """

    rowwise = False

    def __init__(self, targets: torch.Tensor):
        self.targets = targets
        self.out_dim = targets.shape[-1]

    def select(self, idx):
        return TargetVectorHead(self.targets.index_select(0, idx))

    def per_sample(self, out, y):
        goal = torch.gather(self.targets, 1, y.unsqueeze(-1).expand(-1, -1, self.out_dim))
        loss = (out - goal).pow(2).mean(-1)
        nearest = torch.cdist(out, self.targets).argmin(-1)
        return loss, nearest == y


def target_vectors(gen: torch.Generator, num_classes: int, dim: int) -> torch.Tensor:
    return torch.randn((num_classes, dim), generator=gen, dtype=torch.float64)


class ScalarRegressionHead(Head):
    """Squared error to a scalar target (cubic teacher); correct = |prediction − target| < `tolerance`.

    The squared error is the loss, so `val/loss` is the test MSE and sqrt(val/loss) the test RMSE. The tolerance
    turns a regression into an accuracy, so crossing steps and phases apply unchanged.
    """

    out_dim = 1

    def __init__(self, tolerance: float):
        self.tolerance = tolerance

    def per_sample(self, out, y):
        err = out.squeeze(-1) - y.to(out.dtype)
        return err.pow(2), err.abs() < self.tolerance


def make_head(loss: str, data, dtype=torch.float32):
    """The head a plain-output family (mlp, quadratic, two_layer) uses for `data`.

    Regression tasks (no classes) get the scalar head with the task's tolerance; classification tasks get MSE to
    one-hot targets (`loss="mse"`) or cross-entropy (`loss="cross_entropy"`).
    """
    if data.num_classes is None:
        return ScalarRegressionHead(float(data.meta.get("tolerance", 0.5)))
    return OneHotMSEHead(data.num_classes) if loss == "mse" else ClassificationHead(data.num_classes)
