"""What an optimizer kind declares, and the registry of kinds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# An update: (param, grad, scratch, lr [K,1] with freezing and warm-up folded in, hypers, state, step as a tensor,
# noise or None, matrices), in place. `matrices`: (start, end, shape, scale) of the group's tensors that take a
# matrix step (Muon), else empty.
Update = Callable[..., None]


@dataclass(frozen=True)
class OptimizerKind:
    name: str
    update: Update
    state: tuple[str, ...] = ()  # parameter-sized tensors kept per member across steps (memory sizing asks them)
    reads: tuple[str, ...] = ()  # OptimConfig fields this kind alone reads (a spec that sets them otherwise errs)
    noise: bool = False  # draws per-member Gaussian noise every step (Langevin)
    fused_adam: str | None = None  # "coupled" or "decoupled": torch's fused Adam kernel can take the step
    matrices: bool = False  # the group's matrices take a step of their own (Muon)


KINDS: dict[str, OptimizerKind] = {}


def register(kind: OptimizerKind) -> OptimizerKind:
    KINDS[kind.name] = kind
    return kind


def fields_read_by_kind() -> dict[str, list[str]]:
    """Each kind-specific OptimConfig field -> the kinds that read it (OptimConfig.check_idle's rule)."""
    out: dict[str, list[str]] = {}
    for kind in KINDS.values():
        for f in kind.reads:
            out.setdefault(f, []).append(kind.name)
    return out
