"""Binary operations on small symbol sets: modular arithmetic, Liu's addition, permutation groups."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

import torch

from ..config import bounded
from ..errors import SpecError
from . import TASKS
from .base import SplitFields, TaskData, random_split


def is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


MODULAR_OPS = {
    "add": lambda a, b, p: (a + b) % p,
    "sub": lambda a, b, p: (a - b) % p,
    "mul": lambda a, b, p: (a * b) % p,
    "div": lambda a, b, p: (a * pow(b, p - 2, p)) % p,  # Fermat inverse: needs p prime and b != 0
    "x2_plus_y2": lambda a, b, p: (a * a + b * b) % p,
    "x2_plus_xy_plus_y2": lambda a, b, p: (a * a + a * b + b * b) % p,
}


class SplitTask(SplitFields):
    """Algorithmic tasks split by the shared SplitFields; subclasses only build the table."""

    def split(self, data: TaskData, seed: int):
        n = len(data.y)
        return random_split(n, self.n_train(n), seed if self.split_seed is None else self.split_seed)


@TASKS.register("modular")
@dataclass
class ModularTask(SplitTask):
    """a op b mod p over all pairs (b != 0 for division): Power et al., Nanda et al., RFM papers."""

    op: Literal["add", "sub", "mul", "div", "x2_plus_y2", "x2_plus_xy_plus_y2"] = "add"
    p: int = bounded(97, ge=2)

    def validate(self, path):
        if self.op == "div" and not is_prime(self.p):
            raise SpecError(f"{path}.p", f"got {self.p}; op 'div' needs a prime p (e.g. 23, 31, 61, 97, 113)")
        self.validate_split(path, self.p * (self.p - 1 if self.op == "div" else self.p))

    def data(self) -> TaskData:
        p, f = self.p, MODULAR_OPS[self.op]
        pairs = [(a, b) for a in range(p) for b in range(p) if not (self.op == "div" and b == 0)]
        x = torch.tensor(pairs, dtype=torch.long)
        y = torch.tensor([f(a, b, p) for a, b in pairs], dtype=torch.long)
        return TaskData(x=x, y=y, num_classes=p, vocab_size=p, meta={"p": p, "op": self.op})


@TASKS.register("addition")
@dataclass
class AdditionTask(SplitTask):
    """Liu et al.'s toy addition: unordered pairs i <= j of 0..p-1, label i + j (2p - 1 classes)."""

    p: int = bounded(10, ge=2)

    def validate(self, path):
        self.validate_split(path, self.p * (self.p + 1) // 2)

    def data(self) -> TaskData:
        pairs = [(i, j) for i in range(self.p) for j in range(i, self.p)]
        x = torch.tensor(pairs, dtype=torch.long)
        return TaskData(x=x, y=x.sum(1), num_classes=2 * self.p - 1, vocab_size=self.p, meta={"p": self.p})


@TASKS.register("permutation")
@dataclass
class PermutationTask(SplitTask):
    """Composition a∘b in the symmetric group S_n (n=3 for Liu's non-abelian toy, n=5 for Power et al.)."""

    n: int = bounded(3, ge=2, le=6)

    def validate(self, path):
        count = len(list(itertools.permutations(range(self.n))))
        self.validate_split(path, count * count)

    def data(self) -> TaskData:
        perms = list(itertools.permutations(range(self.n)))
        index = {perm: i for i, perm in enumerate(perms)}
        pairs, labels = [], []
        for i, a in enumerate(perms):
            for j, b in enumerate(perms):
                pairs.append((i, j))
                labels.append(index[tuple(a[b[k]] for k in range(self.n))])  # (a∘b)(k) = a(b(k))
        k = len(perms)
        return TaskData(
            x=torch.tensor(pairs, dtype=torch.long), y=torch.tensor(labels, dtype=torch.long),
            num_classes=k, vocab_size=k, meta={"n": self.n, "perms": perms},
        )
