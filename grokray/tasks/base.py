"""What every task produces: the whole dataset as tensors, plus how to split it per seed."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import SpecError
from ..spec.blocks import bounded


@dataclass
class TaskData:
    """The full dataset. Each trial (or pack member) picks its own train/val index sets from it."""

    x: torch.Tensor  # [N, n_symbols] long for algorithmic tasks, [N, d] float otherwise
    y: torch.Tensor  # [N] long class labels, or [N] float targets
    num_classes: int | None  # classification tasks: size of the label set
    vocab_size: int | None = None  # symbol tasks: number of distinct input symbols
    meta: dict = field(default_factory=dict)  # task-specific facts (p, op, symmetry groups, ...)


@dataclass
class SplitFields:
    """Train/val split shared by the algorithmic tasks: a fraction or an absolute size, seeded."""

    train_fraction: float | None = bounded(None, gt=0.0, le=1.0)
    train_size: int | None = bounded(None, ge=1)
    # None: use the trial seed, so seeds vary the split as in Liu et al.
    split_seed: int | None = bounded(None, ge=0, lt=2**32)

    def validate_split(self, path: str, n_total: int):
        if self.train_fraction is not None and self.train_size is not None:
            raise SpecError(f"{path}.train_size", "set train_fraction or train_size, not both")
        if self.train_size is not None and self.train_size > n_total:
            raise SpecError(f"{path}.train_size", f"got {self.train_size}; the dataset has {n_total} samples")

    def n_train(self, n_total: int) -> int:
        if self.train_size is not None:
            return self.train_size
        fraction = 0.5 if self.train_fraction is None else self.train_fraction
        return max(1, round(fraction * n_total))


def random_split(n_total: int, n_train: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded uniform split; identical on every machine because it uses torch's CPU generator."""
    train, val = drawn_split(n_total, n_train, torch.Generator().manual_seed(int(seed)))
    return train.sort().values, val


def drawn_split(n_total: int, n_train: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The first n_train rows of one randperm from `gen` train, in the order drawn (a script's
    `data[:, randperm(n)]`, whose epochs then shuffle that order); the rest validate, sorted."""
    perm = torch.randperm(n_total, generator=gen)
    return perm[:n_train], perm[n_train:].sort().values
