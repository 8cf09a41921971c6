"""A PackTrainer's checkpoint: tensors, lists and numbers only, so `torch.load(weights_only=True)` reads it and
a crafted file cannot run code. Version 3 adds the rows kept at crossings and stops (engine.curves)."""

from __future__ import annotations

import dataclasses

import torch

from ..spec.blocks import to_dict
from .result import MemberResult


def pack_state_dict(trainer) -> dict:
    """Everything a PackTrainer needs to go on from this step, as tensors, lists and numbers."""
    return {
        "version": 3,
        "configs": [to_dict(c) for c in trainer.all_configs],
        "members": list(trainer.members),
        "finished": {m: dataclasses.asdict(r) for m, r in trainer.finished.items()},
        "step": trainer.step,
        "model": {g: flat.clone() for g, flat in trainer.model.flat.items()},
        "optim": {g: o.state_dict() for g, o in trainer.optimizers.items()},
        "rng": trainer.rng.state_dict(),
        "batches": trainer.batches.state_dict(),
        "cross_train": trainer.cross_train.clone(),
        "cross_val": trainer.cross_val.clone(),
        "diverged": trainer.diverged.clone(),
        "active": trainer.active.clone(),
        "last": trainer.last.clone(),
        "marks": trainer.marks.clone(),
        "stopped_at": list(trainer.stopped_at),
        "stopped_wall": list(trainer.stopped_wall),
        "curve_steps": list(trainer.curve_steps),
        "curve_rows": torch.stack(trainer.curve_rows).cpu() if trainer.curve_rows else torch.zeros(0),
    }


def load_pack_state(trainer, state: dict) -> None:
    """Restore pack_state_dict's output into a PackTrainer built from the same configurations."""
    if state["configs"] != [to_dict(c) for c in trainer.all_configs]:
        raise ValueError("checkpoint belongs to different configurations")
    if state["members"] != trainer.members:  # the checkpointed pack had compacted
        trainer.select_members([trainer.members.index(m) for m in state["members"]])
    trainer.finished = {m: MemberResult(**r) for m, r in state["finished"].items()}
    trainer.step = state["step"]
    for g, flat in state["model"].items():
        trainer.model.flat[g].copy_(flat)
    for g, o in trainer.optimizers.items():
        o.load_state_dict(state["optim"][g])
    trainer.rng.load_state_dict(state["rng"])
    trainer.batches.load_state_dict(state.get("batches", {}))  # absent before epoch batches: iid keeps none
    for name in ("cross_train", "cross_val", "diverged", "active", "last"):
        setattr(trainer, name, state[name].to(trainer.device))
    if "marks" in state:  # version 3; an older checkpoint's curves end at their last scheduled point
        trainer.marks = state["marks"].to(trainer.device)
        trainer.stopped_wall = list(state["stopped_wall"])
    trainer.stopped_at = list(state["stopped_at"])
    trainer.curve_steps = list(state["curve_steps"])
    trainer.curve_rows = [r.to(trainer.device) for r in state["curve_rows"]] if len(state["curve_rows"]) else []
