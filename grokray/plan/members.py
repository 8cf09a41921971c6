"""A pack's members built from its first configuration and their points, without parsing each one again.

The Survey parses and checks the configuration at every point once (the driver's one parse each). A pack's
members share everything but their per-member fields, so the pack is built from its first configuration: for each
member only the swept keys whose values differ from the first's are set, each coerced to its field's type. The
result equals `spec.trial(point)` (tests/test_plan_members.py holds the two side by side).
"""

from __future__ import annotations

import copy

from ..spec.blocks import OptimConfig, coerce, fields_and_hints, parse_optim
from ..spec.trial import TrialConfig


def member_config(first: TrialConfig, first_point: dict, point: dict, optim_blocks: dict) -> TrialConfig:
    """The configuration at `point`, from `first` (parsed at `first_point`, in the same pack). `optim_blocks`: the
    spec's optim blocks, so that a swept `optim.default.X` reaches the groups that do not set X themselves."""
    config = copy.deepcopy(first)
    for key, value in point.items():
        if key in first_point and first_point[key] == value and type(first_point[key]) is type(value):
            continue
        set_swept(config, key, value, optim_blocks)
    return config


def set_swept(config: TrialConfig, key: str, value, optim_blocks: dict) -> None:
    """Set dotted `key` of `config` as parse_trial would read it from the spec."""
    if key == "seed":
        config.seed = int(value)
        return
    parts = key.split(".")
    if parts[:2] == ["optim", "default"]:
        for group, cfg in config.optim.items():
            if parts[2] not in (optim_blocks.get(group) or {}):
                _set_leaf(cfg, parts[2:], value, f"optim.{group}.{'.'.join(parts[2:])}")
        return
    head = config.optim[parts[1]] if parts[0] == "optim" else getattr(config, parts[0])
    _set_leaf(head, parts[2:] if parts[0] == "optim" else parts[1:], value, key)


def _set_leaf(obj, path: list[str], value, key: str) -> None:
    for part in path[:-1]:
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    leaf = path[-1]
    if isinstance(obj, dict):
        obj[leaf] = copy.deepcopy(value)
    elif isinstance(obj, OptimConfig) and leaf in obj.methods:
        obj.methods[leaf] = parse_optim({leaf: value}, key.rsplit(".", 1)[0]).methods[leaf]  # its Setting's type
    else:
        fields, hints = fields_and_hints(type(obj))
        setattr(obj, leaf, coerce(hints[leaf], value, key, dict(fields[leaf].metadata)))
