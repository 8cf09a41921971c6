"""How a pack draws its minibatches (`train.batches`), each member from its own generator, so it draws the same
batches alone or in any pack.

- iid (the default): every batch drawn with replacement from the member's training rows.
- epochs: the member's training rows shuffled every epoch and cut into `batch_size` pieces, the last one smaller
  (9 x 512 + 48 on 4,656 rows), as a PyTorch loop over a shuffled DataLoader draws them (the Grokfast authors'
  benchmark). Members with different training sets have epochs of different lengths, so a batch is
  [K, batch_size] with 0 weight on the rows past a member's short last batch. With `streams`
  (train.seed_stream: script) each epoch shuffles the previous epoch's order with the member's one stream, as a
  script's `rows = rows[:, randperm(n)]` does, instead of drawing a fresh order from the batch generator.
"""

from __future__ import annotations

import torch


class IidBatches:
    def __init__(self, n_train: list[int], batch_size: int, random, streams=None):
        self.batch_size, self.random = batch_size, random  # streams: only a full batch (which draws none) has them

    def next(self, train_idx: torch.Tensor, n_train: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of `train_idx` [K, B] and their weights 1/B."""
        u = self.random.rand((self.batch_size,), torch.float64, train_idx.device)
        pos = (u * n_train.view(-1, 1)).long()
        return torch.gather(train_idx, 1, pos), torch.full(pos.shape, 1.0 / self.batch_size, dtype=dtype,
                                                           device=train_idx.device)

    def select(self, keep: list[int]) -> None:
        """Nothing of its own: the generators are the trainer's MemberRandom, which selects itself."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class EpochBatches:
    def __init__(self, n_train: list[int], batch_size: int, random, streams: list[torch.Generator] | None = None):
        self.n, self.batch_size, self.random, self.streams = list(n_train), batch_size, random, streams
        self.perm: list[torch.Tensor | None] = [None] * len(self.n)
        self.pos = [0] * len(self.n)

    def next(self, train_idx: torch.Tensor, n_train: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch of every member: rows of `train_idx` [K, B] and weights 1/len(batch) [K, B] (0: padding)."""
        K, B = len(self.n), self.batch_size
        pos = torch.zeros((K, B), dtype=torch.long)
        weight = torch.zeros((K, B), dtype=torch.float64)
        for k, n in enumerate(self.n):
            if self.perm[k] is None or self.pos[k] >= n:  # a new epoch
                self.perm[k], self.pos[k] = self._shuffled(k, n), 0
            take = self.perm[k][self.pos[k]: self.pos[k] + B]
            self.pos[k] += len(take)
            pos[k, : len(take)] = take
            weight[k, : len(take)] = 1.0 / len(take)
        device = train_idx.device
        return torch.gather(train_idx, 1, pos.to(device)), weight.to(dtype=dtype, device=device)

    def _shuffled(self, k: int, n: int) -> torch.Tensor:
        if self.streams is None:
            gen = self.random.generators[k]
            return torch.randperm(n, generator=gen, device=gen.device).cpu()
        previous = torch.arange(n) if self.perm[k] is None else self.perm[k]
        return previous[torch.randperm(n, generator=self.streams[k])]

    def select(self, keep: list[int]) -> None:
        self.n = [self.n[k] for k in keep]
        self.streams = None if self.streams is None else [self.streams[k] for k in keep]
        self.perm = [self.perm[k] for k in keep]
        self.pos = [self.pos[k] for k in keep]

    def state_dict(self) -> dict:
        state = {"perm": [torch.zeros(0, dtype=torch.long) if p is None else p.clone() for p in self.perm],
                 "pos": list(self.pos)}
        if self.streams is not None:
            state["streams"] = [g.get_state() for g in self.streams]
        return state

    def load_state_dict(self, state: dict) -> None:
        self.perm = [p.clone() if len(p) else None for p in state["perm"]]
        self.pos = list(state["pos"])
        for g, saved in zip(self.streams or [], state.get("streams", []), strict=False):
            g.set_state(saved)


BATCHES = {"iid": IidBatches, "epochs": EpochBatches}
