"""How a pack measures its members: each member's train and held-out loss and accuracy from per-sample values and
its own 0/1 masks, counted in float64 so that 9 of 10 correct is exactly 0.9, NaN where a member has no held-out
rows. Pure tensor functions: the captured step (train.capture: compiled) traces them with the forward."""

from __future__ import annotations

import math

import torch


def measured_cols(loss, correct, on_train, val_loss, val_correct, on_val, n_train, n_val, has_val) -> torch.Tensor:
    """[K, 4] train loss, train acc, val loss, val acc: per-sample [K, N] losses and correctness, masked by each
    member's training rows (on_train) and held-out rows (on_val), divided once by its counts."""
    n_train = n_train.double()
    val = torch.stack([(val_loss.detach().double() * on_val).sum(1) / n_val,
                       (val_correct.double() * on_val).sum(1) / n_val], 1)
    return torch.cat([torch.stack([(loss.detach().double() * on_train).sum(1) / n_train,
                                   (correct.double() * on_train).sum(1) / n_train], 1),
                      torch.where(has_val.view(-1, 1), val, math.nan)], 1)


def metric_columns(train_loss, train_acc, val_loss, val_acc, has_val) -> torch.Tensor:
    """[K, 4] from per-member columns (None: not measured, NaN), the held-out two NaN where a member has none."""
    K = has_val.shape[0]
    nan = torch.full((K,), math.nan, dtype=torch.float64, device=has_val.device)
    cols = [nan if c is None else c.double() for c in (train_loss, train_acc, val_loss, val_acc)]
    cols[2:] = [torch.where(has_val, c, nan) for c in cols[2:]]
    return torch.stack(cols, 1)
