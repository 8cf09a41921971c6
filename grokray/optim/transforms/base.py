"""What a gradient transform declares, and the registry of transforms.

A gradient transform is a de-grokking method that rewrites a group's gradient before the optimizer's update
(Grokfast's filters, ⊥Grad). Each is one file here: the optim.<group> fields it reads (their types, defaults,
bounds and whether each member may hold its own value), the field and value that ask for it, and the state it keeps.
The spec's parsing (config.OptimConfig), the pack's signature, the idle-field check and the group optimizer all
read these declarations, so a new method is its own file and its test row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch


@dataclass(frozen=True)
class Setting:
    """One optim.<group> field. `per_member`: each member of a pack may hold its own value (a [K, 1] column the
    transform reads from `h`); otherwise the value is the pack's, part of its signature."""

    name: str
    type: type  # float, int, bool or str (a str field's allowed values are the `on` values that name it)
    default: Any
    per_member: bool = True
    bounds: dict = field(default_factory=dict)  # ge, gt, le, lt, as config.bounded checks them
    doc: str = ""


class TransformState(Protocol):
    """A transform's working state over one flat [K, P] group."""

    def apply_(self, param: torch.Tensor, grad: torch.Tensor, h: dict[str, torch.Tensor]) -> None:
        """Rewrite `grad` in place, each member with its own settings (`h`: the group's [K, 1] columns)."""

    def select(self, idx: torch.Tensor) -> None:
        """Keep members `idx` (a pack compacting away its finished members)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@dataclass(frozen=True)
class GradTransform:
    name: str
    switch: Setting  # the field that asks for it: a bool (on when true) or a str choice shared by several transforms
    on: Any  # the switch's value that asks for it
    settings: tuple[Setting, ...]  # the other fields it reads
    # (grad [K, P], the pack's OptimConfigs, segments of the flat group) -> its state; `segments`: (start, stop,
    # shape) of each parameter tensor in the flat group
    build: Callable[..., TransformState]
    tensors_per_parameter: Callable[[Any], int] = lambda cfg: 0  # parameter-sized tensors of state, per member
    order: int = 0  # transforms apply in increasing order (⊥Grad before a filter amplifies what it left)
    state_key: str = ""  # the checkpoint's key for its state (default: its name)

    def asked(self, cfg) -> bool:
        return getattr(cfg, self.switch.name) == self.on

    def key(self) -> str:
        return self.state_key or self.name


TRANSFORMS: dict[str, GradTransform] = {}


def register(transform: GradTransform) -> GradTransform:
    """Add a transform; a setting two transforms share (Grokfast's lambda) must be declared alike by both, and a
    choice between transforms (a str switch) is the pack's, not each member's."""
    if transform.switch.type is str and transform.switch.per_member:
        raise ValueError(f"transform {transform.name!r}: a str switch chooses for the whole pack (per_member=False)")
    for s in (transform.switch, *transform.settings):
        known = declared_settings().get(s.name)
        if known is not None and (known.type, known.default, known.per_member, known.bounds) != (
                s.type, s.default, s.per_member, s.bounds):
            raise ValueError(f"transform {transform.name!r} declares {s.name!r} unlike another transform does")
    TRANSFORMS[transform.name] = transform
    return transform


def unregister(name: str) -> None:
    """Remove a transform (a test's planted method)."""
    TRANSFORMS.pop(name, None)


def declared_settings() -> dict[str, Setting]:
    """Every field a registered transform reads or is asked by, by name, in registration order."""
    out: dict[str, Setting] = {}
    for t in TRANSFORMS.values():
        for s in (t.switch, *t.settings):
            out.setdefault(s.name, s)
    return out


def switch_values(name: str) -> tuple:
    """A str switch's allowed values: its default (no transform), then each transform's `on` value."""
    switch = declared_settings()[name]
    return (switch.default, *[t.on for t in TRANSFORMS.values() if t.switch.name == name])


def readers(setting: str) -> list[GradTransform]:
    """The transforms that read (or are asked by) `setting`."""
    return [t for t in TRANSFORMS.values() if setting in (t.switch.name, *(s.name for s in t.settings))]


def asked_transforms(configs) -> list[GradTransform]:
    """The transforms some configuration of a pack asks for, in the order they apply."""
    return sorted((t for t in TRANSFORMS.values() if any(t.asked(c) for c in configs)), key=lambda t: t.order)
