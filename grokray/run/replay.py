"""`grokray replay DIR`: deliver what a launch left in its spool (the parent first, if the server never saw it,
then its children); a search's trials are then linked to the runs the replay made."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from ..errors import SpecError
from ..tracking.client import existing_store
from ..tracking.delivery import replay_dir
from ..tracking.drivers import left_by_dead_driver
from ..tracking.spool import pending_points, read_spool, spool_files
from ..tracking.store import Store
from ..tracking.trackers import open_tracker
from ..tracking.uri import resolve_tracking_uri, tracking_uri_problem
from .complete import complete_launch


def replay(spool_dir: str, tracking_uri: str | None, wait_s: float, link_trials=None) -> int:
    """Deliver, complete the launch's record (run/complete.py), print what went, and return the exit code
    (3: batches are still undelivered). `link_trials(spool_dir, uri)`: once all is delivered, a search's trials
    linked to the runs the replay made (how many; None for a spool that is not a search's), given by the caller
    so that this layer knows nothing of the search."""
    uri = resolve_tracking_uri(tracking_uri)
    if not (math.isfinite(wait_s) and wait_s >= 0):
        raise SpecError("--wait", f"got {wait_s}; must be a finite number of seconds >= 0")
    if problem := tracking_uri_problem(uri):
        raise SpecError("--tracking-uri", problem)
    if Path(spool_dir).is_file():
        raise SpecError("dir", f"{spool_dir!r} is a file; expected the folder a launch named "
                        "(<storage>/undelivered/<launch key>)")
    if not spool_files(spool_dir):
        existing_store(uri)  # a replay that finds nothing to send must not create a store to look in
        done = Store(uri).launch_parent(Path(spool_dir).name)  # replayed before: its folder went with its batches
        if done is None:
            raise SpecError("dir", f"no spool files (*.jsonl) in {str(Path(spool_dir))!r} and no launch of that "
                                   f"key in {uri}; nothing to replay")
        complete_launch(spool_dir, uri)
        print(f"nothing left to replay: launch {Path(spool_dir).name} is delivered (parent run {done.run_id})")
        return 0
    check_spool(spool_dir)
    batches, points = pending_points(spool_dir)
    sent, sent_points, left = replay_dir(spool_dir, open_tracker(uri), deadline_s=wait_s)
    print(f"replayed {sent} of {batches} batches ({sent_points} of {points} metric points) to {uri}")
    if not left and link_trials is not None and (linked := link_trials(spool_dir, uri)) is not None:
        print(f"linked {linked} search trials to the runs the replay made")
    if left:
        print(f"grokray: {left} batches still undelivered in {spool_dir}; is {uri} up? run this again",
              file=sys.stderr)
        return 3
    parent = complete_launch(spool_dir, uri)
    if parent is not None:
        print(f"the launch's record is complete (parent run {parent}: runs table, description, figures)")
        if note := left_by_dead_driver(Store(uri).run(parent)):  # delivered, but its driver never closed it
            print(note, file=sys.stderr)
    return 0


def check_spool(spool_dir: str) -> None:
    """A folder whose *.jsonl files hold no line grokray wrote is refused (no spool here); a damaged line of a
    spool is named, and the rest is replayed without it."""
    files = {path: read_spool(path) for path in spool_files(spool_dir)}
    if not any(read.records for read in files.values()):
        raise SpecError("dir", f"{str(Path(spool_dir))!r} holds no spool: none of its {len(files)} *.jsonl files "
                               "has a line a grokray launch wrote; expected the folder a launch named "
                               "(<storage>/undelivered/<launch key>)")
    for path, read in files.items():
        if read.damaged:
            lines = ", ".join(map(str, read.damaged[:5])) + (" ..." if len(read.damaged) > 5 else "")
            print(f"grokray: {path}: {len(read.damaged)} damaged lines (line {lines}) are not spooled batches; "
                  "skipped, the rest is replayed", file=sys.stderr)
