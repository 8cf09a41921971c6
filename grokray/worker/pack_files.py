"""A launch's packs as files beside its Tune experiment, and a trial's config holding only where its pack is.

Tune keeps each trial's config about seven times (config, unresolved config, evaluated params, experiment tag,
the last result, each checkpoint's result), in the driver's memory and in every experiment-state save. A pack
of 1,000 members in its config made both grow with the number of configurations; a reference keeps them per
pack. The files sit in the experiment's own folder (local, shared, or a cloud URI through pyarrow, as Tune's
storage), so a resumed experiment finds its packs where its trials say they are.
"""

from __future__ import annotations

import json

from ..spec.wire import compact_pack, full_pack

PACKS_DIR = "grokray-packs"


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
