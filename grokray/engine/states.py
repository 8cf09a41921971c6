"""Final states of a pack's members as plain tensor dicts (saved as MLflow artifacts when the spec's
`artifacts: {final_state: true}` asks; read back by analysis.artifacts). Torch only.

A PackTrainer member's state is its slice of every stacked parameter, cropped to the member's own shapes
(narrower members are zero-padded in the stack; the group's pad mask says where their real entries are). An
RfmTrainer's state is its feature matrix M. Everything is a CPU tensor, so `torch.load(weights_only=True)` reads it.
"""

from __future__ import annotations

import torch

STATE_ARTIFACT = "final_state.pt"


def _crop(t: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The leading-corner block of `t` where `mask` is True (pad_stack pads at the end of each dim)."""
    if mask is None or bool(mask.all()):
        return t
    if not bool(mask.any()):
        return t[tuple(slice(0, 0) for _ in t.shape)]
    region = []
    for d in range(t.dim()):
        other = tuple(i for i in range(t.dim()) if i != d)
        present = mask.any(dim=other) if other else mask
        region.append(slice(0, int(present.nonzero().max()) + 1))
    return t[tuple(region)]


def pack_member_states(trainer) -> list[dict[str, torch.Tensor] | None]:
    """A PackTrainer's: one state per configuration of the pack, in the order the pack was given them; None for a
    member whose rows were compacted away (keep `trainer.compact = False` to have them all)."""
    model = trainer.model
    states: list[dict[str, torch.Tensor] | None] = [None] * len(trainer.all_configs)
    for row, m in enumerate(trainer.members):
        state = {}
        for name, stacked in model.named_stacked():
            group, start, stop, shape = model.layout[name]
            mask = model.pad_masks.get(group)
            member_mask = mask[row, start:stop].view(shape) if mask is not None else None
            state[name] = _crop(stacked[row].detach(), member_mask).cpu().clone()
        states[m] = state
    return states
