"""A pack as Tune stores it: one base configuration and, per member, only the fields where it differs.

Tune keeps a trial's config several times over (the config, the unresolved config, the evaluated params, the
experiment tag, the last result, each checkpoint's result), in the driver's memory and in every experiment-state
save. With each member's whole configuration (~1 KB) that was ~14 KB per configuration: 1.4 GB of state for a
10^5-configuration sweep, saved again and again. A member's diff against its pack's base is its swept values, a
few dozen bytes. The worker rebuilds the full member dicts (`full_pack`) before anything reads them.
"""

from __future__ import annotations

import copy

WIRE_KEY = "base"  # a pack in the compact form has its base configuration under this key


def _leaves(d: dict, prefix: tuple = ()) -> dict[tuple, object]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_leaves(v, (*prefix, k)))
        else:
            out[(*prefix, k)] = v
    return out


def _diff(base: dict, config: dict) -> list[list]:
    """[[path, value], ...] of the leaves where `config` differs from `base` (both the same nested shape)."""
    have, want = _leaves(base), _leaves(config)
    if have.keys() != want.keys():  # a member of another shape (never in one pack): carry it whole
        return [[[], config]]
    return [[list(path), value] for path, value in want.items() if have[path] != value]


def compact_pack(pack: dict) -> dict:
    """A pack dict (members carrying their whole `config`) in the compact form."""
    members = pack["members"]
    if not members or WIRE_KEY in pack:
        return pack
    base = members[0]["config"]
    return {**{k: v for k, v in pack.items() if k != "members"}, WIRE_KEY: base,
            "members": [{**{k: v for k, v in m.items() if k != "config"}, "diff": _diff(base, m["config"])}
                        for m in members]}


def full_pack(pack: dict) -> dict:
    """The pack with every member's whole `config` again (a pack already in that form is returned as it is)."""
    if WIRE_KEY not in pack:
        return pack
    base = pack[WIRE_KEY]
    members = []
    for m in pack["members"]:
        config = copy.deepcopy(base)
        for path, value in m["diff"]:
            if not path:
                config = copy.deepcopy(value)
                continue
            node = config
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = copy.deepcopy(value)
        members.append({**{k: v for k, v in m.items() if k != "diff"}, "config": config})
    return {**{k: v for k, v in pack.items() if k not in (WIRE_KEY, "members")}, "members": members}
