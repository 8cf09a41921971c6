"""Binary operations on small symbol sets: modular arithmetic, Liu's addition, permutation groups."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

import torch

from ..errors import SpecError
from ..spec.blocks import bounded
from . import TASKS
from .base import SplitFields, TaskData, drawn_split, random_split

MAX_P = 5000  # a p x p table of 25 million pairs; the papers use p <= 113, and a typo such as p: 1000003 should be
# refused at once rather than probed for memory (or trial-divided for primality) for minutes


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

    symbolic = True  # inputs are pairs of symbol ids (models with embedding tables need this)

    def split(self, data: TaskData, seed: int):
        n = len(data.y)
        return random_split(n, self.n_train(n), seed if self.split_seed is None else self.split_seed)

    @property
    def splits_from_the_seed(self) -> bool:
        """Whether the split is one random draw from the trial's seed (what train.seed_stream: script continues)."""
        return self.split_seed is None and getattr(self, "split_mode", "random") == "random"

    def split_from_stream(self, data: TaskData, gen: torch.Generator):
        """The random split drawn from `gen` (train.seed_stream: script), training rows in the order drawn."""
        n = len(data.y)
        return drawn_split(n, self.n_train(n), gen)


@TASKS.register("modular")
@dataclass
class ModularTask(SplitTask):
    """a op b mod p over all pairs (b != 0 for division): Power et al., Nanda et al., RFM papers.

    `split_mode` chooses the held-out set (Tomàs Bernal et al., rfm-symmetry-breaking). The symmetry group of
    a + b mod p is dihedral, with rotation r(a,b) = (a+1, b-1) and reflection s(a,b) = (b,a):

    - random: a seeded uniform split (train_fraction / train_size, as for every algorithmic task);
    - withhold_diagonal: hold out the fixed points of s, all (a, a);
    - withhold_reflection: hold out the fixed points of s·r^k, (a,b) -> (b-k, a+k), i.e. all (a, a+k)
      with k = `reflection_k` (k = 0 is the diagonal);
    - withhold_symmetric: hold out random symmetric pairs {(a,b), (b,a)}, a != b (the training set stays
      invariant under s);
    - random_control: hold out the same number of uniformly random points as withhold_diagonal.

    Symmetric pairs and the control hold out `withhold_count` points (default: the size of the diagonal, p, or
    p - 1 for div; symmetric pairs round it up to an even number). In every non-random split the validation set
    is exactly the held-out set; training is on all other points, or on a seeded subset of them when
    train_fraction or train_size is given (a fraction of the whole table, as in the random split).
    """

    op: Literal["add", "sub", "mul", "div", "x2_plus_y2", "x2_plus_xy_plus_y2"] = "add"
    p: int = bounded(97, ge=2, le=MAX_P)
    split_mode: Literal[
        "random", "withhold_diagonal", "withhold_reflection", "withhold_symmetric", "random_control"
    ] = "random"
    reflection_k: int = bounded(0, ge=0, doc="withhold_reflection: hold out the fixed points (a, a+k) of s·r^k")
    withhold_count: int | None = bounded(None, ge=1, doc="withhold_symmetric / random_control: points held out")
    nonzero_b: bool = False  # b runs over 1..p-1 (always for div): Grokfast's x*y mod 97 leaves out y = 0

    def validate(self, path):
        if self.op == "div" and not is_prime(self.p):
            raise SpecError(f"{path}.p", f"got {self.p}; op 'div' needs a prime p (e.g. 23, 31, 61, 97, 113)")
        n_total = self.p * (self.p - 1 if self.skips_zero_b else self.p)
        self.validate_split(path, n_total)
        if self.split_mode == "random":
            return
        if self.reflection_k >= self.p:
            raise SpecError(f"{path}.reflection_k", f"got {self.reflection_k}; must be < p = {self.p}")
        if self.reflection_k and self.split_mode != "withhold_reflection":
            raise SpecError(
                f"{path}.reflection_k", f"only applies to split_mode 'withhold_reflection', not {self.split_mode!r}"
            )
        if self.withhold_count is not None and self.split_mode not in ("withhold_symmetric", "random_control"):
            raise SpecError(
                f"{path}.withhold_count",
                f"only applies to symmetric pairs and the random control, not split_mode {self.split_mode!r}",
            )
        held = self.n_withheld()
        pairs = (self.p - 1) * (self.p - 2) // 2 if self.skips_zero_b else self.p * (self.p - 1) // 2  # b, a != 0
        if self.split_mode == "withhold_symmetric" and held > 2 * pairs:
            raise SpecError(f"{path}.withhold_count", f"got {held}; only {pairs} symmetric pairs exist")
        if held >= n_total:
            raise SpecError(f"{path}.withhold_count", f"got {held}; the table has only {n_total} points")
        if self.train_fraction is not None or self.train_size is not None:
            n_train = self.n_train(n_total)
            if n_train > n_total - held:
                key = "train_size" if self.train_size is not None else "train_fraction"
                raise SpecError(
                    f"{path}.{key}",
                    f"asks for {n_train} training points; split_mode {self.split_mode!r} "
                    f"leaves {n_total - held} of {n_total}",
                )

    @property
    def skips_zero_b(self) -> bool:
        return self.op == "div" or self.nonzero_b

    def n_withheld(self) -> int:
        """How many points a non-random split holds out."""
        fixed = self.p - 1 if self.skips_zero_b else self.p  # fixed points of a reflection (no b = 0 for div)
        if self.split_mode in ("withhold_diagonal", "withhold_reflection"):
            return fixed
        count = fixed if self.withhold_count is None else self.withhold_count
        return count + count % 2 if self.split_mode == "withhold_symmetric" else count

    def data(self) -> TaskData:
        p, f = self.p, MODULAR_OPS[self.op]
        pairs = [(a, b) for a in range(p) for b in range(p) if not (self.skips_zero_b and b == 0)]
        x = torch.tensor(pairs, dtype=torch.long)
        y = torch.tensor([f(a, b, p) for a, b in pairs], dtype=torch.long)
        return TaskData(x=x, y=y, num_classes=p, vocab_size=p, meta={"p": p, "op": self.op})

    def split(self, data: TaskData, seed: int):
        if self.split_mode == "random":
            return super().split(data, seed)
        gen = torch.Generator().manual_seed(int(seed if self.split_seed is None else self.split_seed))
        held = withheld_points(self, data.x, gen)
        rest = (~held).nonzero().flatten()
        if self.train_fraction is not None or self.train_size is not None:
            rest = rest[torch.randperm(len(rest), generator=gen)[: self.n_train(len(data.x))]].sort().values
        return rest, held.nonzero().flatten()


def withheld_points(task: ModularTask, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Boolean mask over the rows (a, b) of `x` that `task.split_mode` holds out (seeded by `gen` where random)."""
    p, a, b = task.p, x[:, 0], x[:, 1]
    if task.split_mode in ("withhold_diagonal", "withhold_reflection"):
        k = task.reflection_k if task.split_mode == "withhold_reflection" else 0
        return b == (a + k) % p  # fixed points of s·r^k: (a, b) -> (b - k, a + k)
    count = task.n_withheld()
    held = torch.zeros(len(x), dtype=torch.bool)
    if task.split_mode == "random_control":
        held[torch.randperm(len(x), generator=gen)[:count]] = True
        return held
    row = {(int(i), int(j)): r for r, (i, j) in enumerate(x.tolist())}  # withhold_symmetric
    lower = [r for (i, j), r in row.items() if i < j and (j, i) in row]
    for r in torch.randperm(len(lower), generator=gen)[: count // 2].tolist():
        i, j = x[lower[r]].tolist()
        held[row[(i, j)]] = held[row[(j, i)]] = True
    return held


@TASKS.register("addition")
@dataclass
class AdditionTask(SplitTask):
    """Liu et al.'s toy addition: unordered pairs i <= j of 0..p-1, label i + j (2p - 1 classes)."""

    p: int = bounded(10, ge=2, le=MAX_P)

    def validate(self, path):
        self.validate_split(path, self.p * (self.p + 1) // 2)

    def data(self) -> TaskData:
        pairs = [(i, j) for i in range(self.p) for j in range(i, self.p)]
        x = torch.tensor(pairs, dtype=torch.long)
        return TaskData(x=x, y=x.sum(1), num_classes=2 * self.p - 1, vocab_size=self.p,
                        meta={"p": self.p, "parallelograms": True})


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
