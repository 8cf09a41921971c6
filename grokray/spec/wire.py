"""A pack on its way to a worker: one base configuration and, per member, only the fields where it differs, in a
file beside the Tune experiment that the trial's config names.

Tune keeps a trial's config several times over (the config, the unresolved config, the evaluated params, the
experiment tag, the last result, each checkpoint's result), in the driver's memory and in every experiment-state
save. With each member's whole configuration (~1 KB) that was ~14 KB per configuration: 1.4 GB of state for a
10^5-configuration sweep, saved again and again. A member's diff against its pack's base is its swept values, a
few dozen bytes. The worker rebuilds the full member dicts (`full_pack`) before anything reads them.

Even compact, a pack of 1,000 members in its config made Tune's state grow with the number of configurations; a
reference keeps it per pack. The files sit in the experiment's own folder (local, shared, or a cloud URI through
pyarrow, as Tune's storage), so a resumed experiment finds its packs where its trials say they are. The launch
writes them (`store_packs`), the trial reads its own (`load_pack`): the driver and the worker meet here only.
"""

from __future__ import annotations

import copy
import json

PACKS_DIR = "grokray-packs"
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


def _filesystem(path: str):
    from pyarrow import fs

    if "://" in path:
        return fs.FileSystem.from_uri(path)
    return fs.LocalFileSystem(), path


def store_packs(experiment_path: str, packs: list[dict]) -> list[dict]:
    """Write each pack (compact) under <experiment_path>/grokray-packs/; returns the references trials get."""
    filesystem, root = _filesystem(f"{experiment_path.rstrip('/')}/{PACKS_DIR}")
    filesystem.create_dir(root, recursive=True)
    refs = []
    for pack in packs:
        path = f"{root}/{pack['pack_id']}.json"
        with filesystem.open_output_stream(path) as out:
            out.write(json.dumps(compact_pack(pack), separators=(",", ":")).encode())
        scheme = experiment_path.split("://")[0] + "://" if "://" in experiment_path else ""
        refs.append({"pack_id": pack["pack_id"], "members": len(pack["members"]),
                     "file": path if not scheme or path.startswith(scheme) else scheme + path})
    return refs


def load_pack(pack: dict) -> dict:
    """The pack a trial trains, every member with its whole configuration: read from its file when the trial
    holds a reference, else carried in the config itself (a search's trial: its seeds)."""
    if "file" not in pack:
        return full_pack(pack)
    filesystem, path = _filesystem(pack["file"])
    with filesystem.open_input_stream(path) as src:
        return full_pack(json.loads(src.read().decode()))
