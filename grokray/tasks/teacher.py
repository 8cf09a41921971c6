"""Cubic single-index teacher (Droplets, §2.1): Gaussian inputs, y = He₁(w·x) + ε·He₃(w·x).

He₁(z) = z and He₃(z) = z³ − 3z are the first two odd (probabilists') Hermite polynomials, orthogonal under
z ~ N(0, 1); the teacher direction w is a random unit vector, so w·x ~ N(0, 1). The test set is drawn first
from its own stream, so changing `n_train` changes only the training set (and larger training sets contain
the smaller ones): test RMSE curves over n_train compare like with like.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..spec.blocks import bounded
from . import TASKS
from .base import TaskData


def hermite3(z: torch.Tensor) -> torch.Tensor:
    return z**3 - 3 * z


BLOCK = 256


def nested_gaussians(n: int, d: int, seed: int) -> torch.Tensor:
    """n standard Gaussian rows whose first m rows are the same for every n >= m: blocks of BLOCK rows, each from
    its own generator (torch.randn of different sizes does not draw prefix-consistent numbers)."""
    blocks = [
        torch.randn(
            (BLOCK, d), generator=torch.Generator().manual_seed(seed * 1_000_003 + 7919 * (i + 1)), dtype=torch.float64
        )
        for i in range(-(-n // BLOCK))
    ]
    return torch.cat(blocks)[:n] if blocks else torch.zeros((0, d), dtype=torch.float64)


@TASKS.register("cubic_teacher")
@dataclass
class CubicTeacherTask:
    d: int = bounded(20, ge=1, doc="input dimension")
    n_train: int = bounded(500, ge=1)
    n_test: int = bounded(2000, ge=1)
    epsilon: float = bounded(0.3, doc="weight of the cubic component He₃(w·x)")
    teacher_seed: int = 0  # draws w and both data sets
    tolerance: float = bounded(0.3, gt=0.0, doc="a prediction within this of y counts as correct")

    def data(self) -> TaskData:
        gen = torch.Generator().manual_seed(int(self.teacher_seed))
        w = torch.randn(self.d, generator=gen, dtype=torch.float64)
        w /= w.norm()
        x_test = torch.randn((self.n_test, self.d), generator=gen, dtype=torch.float64)
        x_train = nested_gaussians(self.n_train, self.d, int(self.teacher_seed))
        x = torch.cat([x_train, x_test])
        z = x @ w
        y = z + self.epsilon * hermite3(z)
        return TaskData(
            x=x, y=y, num_classes=None, meta={"teacher": w, "tolerance": self.tolerance, "epsilon": self.epsilon}
        )

    def split(self, data: TaskData, seed: int):
        """The first n_train rows train, the n_test after them test; the trial seed only seeds the student."""
        return torch.arange(self.n_train), torch.arange(self.n_train, self.n_train + self.n_test)
