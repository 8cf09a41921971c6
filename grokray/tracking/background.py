"""The driver's delivery while a launch runs: what finished packs handed over (their `*.done.jsonl` spool files)
and the parent's own backlog go out in a background thread, so no worker slot waits out an outage and a parent
the server was away for is created as soon as it answers. `Launch.close` stops it and delivers what is left."""

from __future__ import annotations

import threading

from .delivery import replay_dir
from .parent import ParentRun
from .spool import HANDED_OVER, LAUNCH_SPOOL_PREFIX, spool_files


class BackgroundDelivery:
    def __init__(self, parent: ParentRun, every_s: float = 5.0):
        self.parent, self.every_s = parent, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="grokray-delivery", daemon=True)

    def start(self) -> BackgroundDelivery:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.tick()
            except Exception:  # noqa: BLE001, S110 - never stops a launch: its close delivers (or reports) the rest
                pass

    def tick(self) -> None:
        """One round: the parent's backlog, then the handed-over files, if the server answers."""
        self.parent.deliver_backlog()
        if not self.parent.run_id:
            return
        files = [p for p in spool_files(self.parent.spool_dir) if p.name.endswith(HANDED_OVER)]
        if files and self.parent.answers():
            replay_dir(self.parent.spool_dir, self.parent.tracker, only=files, resolved=self.parent.courier.resolved)

    def finish(self) -> None:
        """Training is over: stop the thread and try every pack's spool once, without waiting, so that the runs an
        outage held back exist before the launch's own close (a search links its trials to them, and a pack its
        scheduler stopped handed nothing over). The parent's own batches stay for the close."""
        self.stop()
        self.parent.deliver_backlog()
        if self.parent.run_id and self.parent.answers():
            files = [p for p in spool_files(self.parent.spool_dir) if not p.name.startswith(LAUNCH_SPOOL_PREFIX)]
            replay_dir(self.parent.spool_dir, self.parent.tracker, only=files, resolved=self.parent.courier.resolved)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
