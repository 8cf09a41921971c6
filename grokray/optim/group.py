"""One optimizer over one parameter group of a pack, with per-member hyperparameters."""

from __future__ import annotations

import torch

from ..config import OptimConfig
from . import primitives as P


class MemberRandom:
    """One generator per member, so a member draws the same numbers alone or inside any pack."""

    def __init__(self, seeds: list[int], device, salt: int):
        self.generators = [torch.Generator(device=device).manual_seed(int(s) * 1_000_003 + salt) for s in seeds]

    def normal(self, shape, dtype, device) -> torch.Tensor:
        return torch.stack([torch.randn(shape, generator=g, dtype=dtype, device=device) for g in self.generators])

    def rand(self, shape, dtype, device) -> torch.Tensor:
        return torch.stack([torch.rand(shape, generator=g, dtype=dtype, device=device) for g in self.generators])

    def state_dict(self):
        return [g.get_state() for g in self.generators]

    def load_state_dict(self, states):
        for g, s in zip(self.generators, states, strict=True):
            g.set_state(s)


class GroupOptimizer:
    """AdamW, Adam, SGD(+momentum), normalized GD or Langevin for a list of stacked [K, ...] tensors."""

    HYPER = ("lr", "weight_decay", "eps", "momentum", "warmup_steps", "temperature")

    def __init__(
        self,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        configs: list[OptimConfig],
        seeds: list[int],
        salt: int,
    ):
        kinds = {c.name for c in configs}
        if len(kinds) != 1:
            raise ValueError(f"a pack shares one optimizer kind per group, got {sorted(kinds)}")
        self.kind = kinds.pop()
        self.params, self.grads = params, grads
        ref = params[0]
        as_tensor = lambda values: torch.tensor(values, dtype=ref.dtype, device=ref.device)  # noqa: E731
        self.h = {name: as_tensor([getattr(c, name) for c in configs]) for name in self.HYPER}
        self.h["beta1"] = as_tensor([c.betas[0] for c in configs])
        self.h["beta2"] = as_tensor([c.betas[1] for c in configs])
        self.state = {
            "exp_avg": [torch.zeros_like(p) for p in params] if self.kind in ("adam", "adamw") else [],
            "exp_avg_sq": [torch.zeros_like(p) for p in params] if self.kind in ("adam", "adamw") else [],
            "momentum": [torch.zeros_like(p) for p in params] if self.kind == "sgd" else [],
        }
        self.noise = MemberRandom(seeds, ref.device, salt) if self.kind == "langevin" else None

    @torch.no_grad()
    def step(self, step: int, masks: list[torch.Tensor]):
        """Apply update number `step` (0-based). `masks[i]` is 1 where param i may move, 0 where frozen."""
        h = self.h
        lr = h["lr"] * P.warmup_factor(step, h["warmup_steps"])
        grads = self.grads
        if self.kind == "adamw":
            deltas = [
                P.decoupled_decay(p, lr, h["weight_decay"])
                - P.per_member(lr, p) * P.adam_direction(g, m, v, step + 1, h["beta1"], h["beta2"], h["eps"])
                for p, g, m, v in zip(self.params, grads, self.state["exp_avg"], self.state["exp_avg_sq"], strict=True)
            ]
        else:
            grads = [P.l2_gradient(g, p, h["weight_decay"]) for p, g in zip(self.params, grads, strict=True)]
            if self.kind == "adam":
                dirs = [
                    P.adam_direction(g, m, v, step + 1, h["beta1"], h["beta2"], h["eps"])
                    for g, m, v in zip(grads, self.state["exp_avg"], self.state["exp_avg_sq"], strict=True)
                ]
            elif self.kind == "sgd":
                dirs = [
                    P.momentum_direction(g, b, h["momentum"])
                    for g, b in zip(grads, self.state["momentum"], strict=True)
                ]
            elif self.kind == "normalized_gd":
                dirs = P.normalize_by_global_norm(grads)
            else:  # langevin: plain gradient step plus thermal noise
                dirs = grads
            deltas = [-P.per_member(lr, d) * d for d in dirs]
            if self.kind == "langevin":
                deltas = [
                    d + P.langevin_noise(p, lr, h["temperature"], self.noise.normal(p.shape[1:], p.dtype, p.device))
                    for d, p in zip(deltas, self.params, strict=True)
                ]
        for p, d, m in zip(self.params, deltas, masks, strict=True):
            p.add_(torch.where(m, d, torch.zeros((), dtype=d.dtype, device=d.device)))

    def state_dict(self) -> dict:
        out = {k: [t.clone() for t in v] for k, v in self.state.items()}
        if self.noise is not None:
            out["noise"] = self.noise.state_dict()
        return out

    def load_state_dict(self, state: dict):
        for key in self.state:
            for dst, src in zip(self.state[key], state[key], strict=True):
                dst.copy_(src)
        if self.noise is not None:
            self.noise.load_state_dict(state["noise"])
