"""A launch whose close could not reach the tracking store, completed by `grokray replay` once every batch is
delivered: what the close would have written (the runs table, the phase counts from the children, the
description and the phase diagram) is written now, and the emptied spool folder is removed. A replayed launch
then ends as one that never lost its server.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml

from ..spec.build import Spec, build_spec
from ..tracking.parent import ParentRun
from ..tracking.schema import (
    CONFIGURATIONS_TAG,
    KIND_TAG,
    NOTE_TAG,
    RUNS_SUMMARY_TAG,
    SPEC_ARTIFACT,
    driver_of,
    phase_count_tags,
)
from ..tracking.spool import pending_points, spool_files
from ..tracking.store import Store
from .report import closing_runs, report_on_parent


def stored_spec(store: Store, run_id: str) -> Spec:
    """The resolved spec a parent run keeps as its artifact (what the launch trained, presets applied)."""
    with tempfile.TemporaryDirectory() as d:
        text = store.download(run_id, SPEC_ARTIFACT, d).read_text()
    return build_spec(yaml.safe_load(text))


def complete_launch(spool_dir: str, uri: str) -> str | None:
    """Write what the launch's close could not, if it is missing; returns the parent run id (None: no parent of
    this launch in the store)."""
    store = Store(uri)
    key = Path(spool_dir).name
    found = store.launch_parent(key)
    if found is None:
        return None
    tags = found.tags
    if NOTE_TAG not in tags or RUNS_SUMMARY_TAG not in tags:
        parent = ParentRun(uri, store.experiments().get(found.experiment_id, ""), str(Path(spool_dir).parents[1]))
        parent.launch_key, parent.started_ms = key, found.start_ms
        parent.attach(found)
        kind = driver_of(tags.get(KIND_TAG)).kind
        runs = None if driver_of(kind).study else closing_runs()
        counts = parent.count_children(on_record=None if runs is None else runs.add)
        for tag, value in phase_count_tags(counts).items():
            parent.set_tag(tag, value)
        configurations = int(tags.get(CONFIGURATIONS_TAG, sum(counts.values())))
        wall_s = ((found.end_ms or found.start_ms or 0) - (found.start_ms or 0)) / 1e3
        report_on_parent(parent, stored_spec(store, found.run_id), kind, found.status, counts, configurations,
                         wall_s, ["completed by `grokray replay` (the tracking store was away at the close)"],
                         runs=runs)
    remove_if_delivered(spool_dir)
    return found.run_id


def remove_if_delivered(spool_dir: str) -> bool:
    """Remove the spool folder once nothing in it waits (its spool files hold no pending batch)."""
    folder = Path(spool_dir)
    if not folder.is_dir() or any(pending_points(spool_dir)):
        return False
    for path in spool_files(spool_dir):
        Path(path).unlink()
    try:
        folder.rmdir()
    except OSError:  # something else lives there (a user's file): left as it is
        return False
    return True
