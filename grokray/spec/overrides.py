"""Dotted overrides of a raw spec: `-s KEY=value` on the command line, a scale preset, an atlas piece's `set`.

A key that is a sweep axis (or a searched key) is pinned to the value, and the caller gets a note saying so:
setting the field under a swept axis would be overwritten at every point, so the override would do nothing.
"""

from __future__ import annotations

import yaml

from ..errors import SpecError
from .blocks import unknown_key_error
from .keys import AXIS_KINDS, SPEC_KEYS


class PlainDumper(yaml.SafeDumper):
    """safe_dump without anchors and aliases: a resolved spec reads as written out in full."""

    def ignore_aliases(self, data):
        return True


def set_dotted(raw: dict, dotted: str, value) -> None:
    """raw['a']['b']['c'] = value for 'a.b.c', creating mappings on the way."""
    parts = dotted.split(".")
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise SpecError(".".join(parts[: i + 1]), f"is {child!r}, not a mapping, so {dotted!r} cannot be set")
        node = child
    node[parts[-1]] = value


def _number_like(value):
    """YAML 1.1 reads 3e-4 (no dot) as a string, also inside a list: a value that reads as a number is one."""
    if isinstance(value, list):
        return [_number_like(v) for v in value]
    if isinstance(value, str) and value.strip().lower() not in ("nan", "inf", "-inf", "+inf"):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def parse_value(text: str):
    """A CLI override value: YAML syntax (so `[1, 2]` and `true` work); number-like strings are numbers."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return _number_like(value)


def apply_preset(raw: dict, preset, where: str) -> None:
    """Apply a mapping of dotted overrides (a scale preset, an atlas piece) to raw, in place."""
    if not isinstance(preset, dict):
        raise SpecError(where, f"expected a mapping of dotted overrides, got {preset!r}")
    for key, value in preset.items():
        check_top(key, where)
        set_override(raw, key, value)


def set_override(raw: dict, key: str, value) -> str | None:
    """Like set_dotted, but `sweep.<dotted axis>[.<kind>]` addresses an axis whose own name contains dots, and a
    field that is a sweep axis is pinned: the axis becomes that one value (setting the field under it would be
    overwritten by every sweep point, so the override would silently do nothing); a searched key likewise. Returns
    what was pinned and what it held before, for the note the CLI prints, else None."""
    sweep = raw.get("sweep")
    if isinstance(sweep, dict) and key in sweep:
        before = sweep[key]
        sweep[key] = {"values": [value]}
        set_dotted(raw, key, value)  # the base agrees, so fields that depend on it (reflection_k) validate
        kind, arg = next(iter(before.items())) if isinstance(before, dict) and len(before) == 1 else ("", before)
        return f"sweep axis {key} to that one value (the spec swept {f'{kind}: {arg}' if kind else before})"
    space = raw.get("search", {}).get("space") if isinstance(raw.get("search"), dict) else None
    if isinstance(space, dict) and key in space:  # a searched key: the search draws only this value
        before = space[key]
        space[key] = {"categorical": [value]}
        set_dotted(raw, key, value)
        return f"searched key {key} to that one value (the spec had search space {before})"
    if key == "seed" and isinstance(sweep, dict) and "seed" in sweep:
        sweep["seed"] = {"values": [value]}
        return "sweep axis seed to that one value"
    if not key.startswith("sweep."):
        set_dotted(raw, key, value)
        return None
    rest = key[len("sweep."):]
    sweep = raw.get("sweep")
    if sweep is None:
        sweep = raw["sweep"] = {}
    if not isinstance(sweep, dict):
        raise SpecError("sweep", f"expected a mapping of dotted field -> axis, got {sweep!r}")
    for axis in sorted(sweep, key=len, reverse=True):
        if rest == axis:
            sweep[axis] = value
            return None
        if rest.startswith(axis + ".") and rest[len(axis) + 1 :] in AXIS_KINDS:
            sweep[axis] = {rest[len(axis) + 1 :]: value}  # a new kind replaces the axis
            return None
    kind = rest.rsplit(".", 1)[-1]
    if kind in AXIS_KINDS and "." in rest:
        sweep[rest.rsplit(".", 1)[0]] = {kind: value}
    else:
        sweep[rest] = value
    return None


def check_top(key: str, where: str):
    top = key.split(".")[0]
    if top not in SPEC_KEYS:
        raise unknown_key_error(where, top, SPEC_KEYS)
