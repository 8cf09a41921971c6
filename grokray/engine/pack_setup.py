"""What a PackTrainer sets up besides its model, splits and optimizers (optim/group.pack_optimizers): how its steps
measure, its norm targets, its progress tensors.

Each is decided once per pack from the configurations; engine/pack.py then only runs steps.
"""

from __future__ import annotations

import math

import torch

from ..contracts import measured_every_step
from .schedule import auto_eval_every


def measuring(configs, model, n_points: int, width: int) -> tuple[bool, bool, int]:
    """(joint, split, eval_every). Full batch, small data: every member is measured on all its points every step,
    so crossings are exact. "joint": one forward over all N points is both the training forward and the
    evaluation. "split", where a backward over held-out rows costs more than a second, gradient-free forward over
    them (the transformer: 1.4-1.5x faster at fraction 0.5): training rows forward and backward, held-out rows
    forward only. The model says which (PackedModel.measures_jointly). Otherwise a full evaluation every
    `eval_every` steps."""
    train = configs[0].train
    if measured_every_step(train, model.uses_dropout, n_points, width):
        joint = model.measures_jointly(n_points)
        return joint, not joint, 1
    gap = min(c.phases.gap for c in configs)
    return False, False, train.eval_every if train.eval_every != "auto" else auto_eval_every(gap)


def norm_targets(model, configs, device) -> torch.Tensor:
    """Omnigrok's constraint: each member's total weight norm held at its target after every update, [K] float64:
    its initial norm, a given number, or NaN (free)."""
    targets = [math.nan if c.train.weight_norm == "free" else c.train.weight_norm for c in configs]
    initial = model.weight_norm().tolist()
    return torch.tensor([initial[k] if t == "initial" else t for k, t in enumerate(targets)], dtype=torch.float64,
                        device=device)


def pack_member_bytes(model, optimizers, dtype, n_points: int) -> int:
    """Bytes one member needs (what `pack_size: auto` divides memory by): its parameters and gradients, the state
    each group's optimizer keeps per parameter (Adam's two moments, Grokfast-MA's window of gradients, ...), and
    forward activations over its data."""
    elem = 8 if dtype == torch.float64 else 4
    params = sum(p[0].numel() for p in model.parameters())
    per_group = {g: f.shape[1] for g, f in model.flat.items()}
    state = sum(per_group[g] * opt.tensors_per_parameter() for g, opt in zip(model.flat, optimizers, strict=True))
    width = sum(p.shape[-1] for p in model.parameters() if p.dim() == 3)
    return elem * (2 * params + state + n_points * max(width, 1) * 3)


def progress_tensors(k: int, marks: int, n_metrics: int, device) -> dict[str, torch.Tensor]:
    """Each member's progress, on the device: its crossing steps (-1: not yet), whether it diverged, whether it
    still trains, its last measured row and the rows marked at its crossings and stop (engine.curves)."""
    return {"cross_train": torch.full((k,), -1, dtype=torch.long, device=device),
            "cross_val": torch.full((k,), -1, dtype=torch.long, device=device),
            "diverged": torch.zeros(k, dtype=torch.bool, device=device),
            "active": torch.ones(k, dtype=torch.bool, device=device),
            "last": torch.full((k, n_metrics), math.nan, dtype=torch.float64, device=device),
            "marks": torch.full((k, marks, n_metrics), math.nan, dtype=torch.float64, device=device)}
