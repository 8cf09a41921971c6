"""Each member's train/validation split as padded [K, ...] rows, so one pack trains every split at once."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import SpecError
from ..tasks.parallelograms import split_ideal_accuracy


@dataclass
class MemberSplits:
    n_train: torch.Tensor  # [K] training points per member
    train_idx: torch.Tensor  # [K, width] training rows, padded with index 0 (weight 0)
    train_w: torch.Tensor  # [K, width] 1/n_train on real rows
    w_train_all: torch.Tensor  # [K, N] 1/n_train on training points
    train_mask_all: torch.Tensor  # [K, N] float64 0/1: metrics are counts divided once (9 of 10 is exactly 0.9)
    val_mask_all: torch.Tensor  # [K, N]
    val_idx: torch.Tensor  # [K, val_width] held-out rows, padded like train_idx (the "split" step evaluates them)
    val_valid: torch.Tensor  # [K, val_width]
    n_val: torch.Tensor  # [K] held-out points (at least 1, a divisor)
    has_val: torch.Tensor  # [K] bool


def draw_splits(configs: list, data, streams: list | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each member's (train, val) indices, from its own seed; with `streams` (train.seed_stream: script), from its
    generator where its init left it, training rows in the order drawn."""
    if streams is None:
        return [c.task.split(data, c.seed) for c in configs]
    return [c.task.split_from_stream(data, g) for c, g in zip(configs, streams, strict=True)]


def ideal_val_accuracies(splits: list, data) -> list[float | None]:
    """Each member's ideal val accuracy (tasks.parallelograms): a property of its split, known before training."""
    return [split_ideal_accuracy(data, tr, va) for tr, va in splits]


def member_splits(splits: list, data, dtype, device) -> MemberSplits:
    K, n = len(splits), len(data.y)
    n_train = torch.tensor([len(t) for t, _ in splits], device=device)
    if int(n_train.min()) < 1:
        raise SpecError("task.train_fraction", "leaves no training samples")
    width = int(n_train.max())
    val_width = max(1, max(len(va) for _, va in splits))
    out = MemberSplits(
        n_train=n_train,
        train_idx=torch.zeros((K, width), dtype=torch.long, device=device),
        train_w=torch.zeros((K, width), dtype=dtype, device=device),
        w_train_all=torch.zeros((K, n), dtype=dtype, device=device),
        train_mask_all=torch.zeros((K, n), dtype=torch.float64, device=device),
        val_mask_all=torch.zeros((K, n), dtype=torch.float64, device=device),
        val_idx=torch.zeros((K, val_width), dtype=torch.long, device=device),
        val_valid=torch.zeros((K, val_width), dtype=torch.float64, device=device),
        n_val=torch.ones(K, device=device),
        has_val=torch.tensor([len(va) > 0 for _, va in splits], device=device),
    )
    for k, (tr, va) in enumerate(splits):
        tr, va = tr.to(device), va.to(device)
        out.train_idx[k, : len(tr)] = tr
        out.train_w[k, : len(tr)] = 1.0 / len(tr)
        out.w_train_all[k, tr] = 1.0 / len(tr)
        out.train_mask_all[k, tr] = 1.0
        out.val_mask_all[k, va] = 1.0
        out.val_idx[k, : len(va)] = va
        out.val_valid[k, : len(va)] = 1.0
    out.n_val = out.val_mask_all.sum(1).clamp(min=1)
    return out
