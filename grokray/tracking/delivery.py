"""Delivery that survives a tracking outage: a bounded in-memory queue, a write-ahead spool (spool.py), retry with
backoff.

A worker never waits on MLflow for long. `Courier.send` tries to deliver a batch (metrics, params, tags and an
optional "terminate" of the run); if the tracking server is unreachable, the batch is appended to the spool (JSON
lines under the sweep's storage directory, before anything else happens to it) and queued in memory, and
training goes on. Later sends first retry the queue, oldest first, no sooner than the backoff allows (1 s,
doubling to 30 s), each run's queued batches merged into one delivery, for at most DRAIN_SLICE_S a report.
Training waits only when the queue holds more than `max_points` metric points: then it
retries until the queue fits again, or until `block_s` has passed; what still cannot go out stays in the spool.

A delivered spooled batch gets a `delivered` line in the same file; a file whose batches are all delivered is
removed. Whatever is left is replayed by `grokray replay DIR` (`replay_dir`), by the driver at the end of the
sweep, or by a retried pack. Replay is idempotent: before a spooled batch is sent, the run's latest stored step
per metric is read, and points at or below it are dropped (a batch may have reached the server although its
request failed, and a retried pack re-logs from its checkpoint).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path

from .client import clean, create_run_once, is_transient, retry
from .queries import children_query, launch_query
from .records import RunStatus
from .schema import TRIAL_KEY_TAG
from .spool import HANDED_OVER, Batch, Spool, head_group, merged, pending_points, spool_files, undelivered

MAX_BACKOFF_S = 30.0
DRAIN_SLICE_S = 1.0  # how long one training report may spend on an outage's backlog; later reports go on with it


class ParentNotCreated(ConnectionError):
    """A child's batch whose launch's parent is not in the store yet (the driver, or `grokray replay`, creates it
    from the launch's own spool first). Transient: the batch waits in the spool like any other."""


def resolve_parent(tracker, experiment_name: str, launch_key: str, resolved: dict[str, str], attempts: int = 3
                   ) -> tuple[str, str]:
    """(experiment id, parent run id) of the launch `launch_key`, found by its tag; ParentNotCreated if absent."""
    if launch_key in resolved:
        return resolved[f"experiment:{launch_key}"], resolved[launch_key]
    exp_id = retry(tracker.experiment_id, experiment_name, attempts=attempts)
    found = retry(tracker.search, [exp_id], launch_query(launch_key), 1, attempts=attempts)[0] \
        if exp_id is not None else []
    if not found:
        raise ParentNotCreated(f"the parent of launch {launch_key} is not in the store yet")
    resolved[f"experiment:{launch_key}"], resolved[launch_key] = exp_id, found[0].run_id
    return exp_id, found[0].run_id


def resolve_run(tracker, batch: Batch, resolved: dict[str, str], attempts: int = 3) -> str:
    """The run a batch goes to: its own id, or the run of its trial key under its parent (found, else created).
    A launch's parent made late (`create` names its experiment and launch) is found by its launch key, else
    created with its experiment; a child of such a parent first finds the parent. `resolved` remembers the
    answers for later batches."""
    if batch.run_id:
        return batch.run_id
    if batch.key in resolved:
        return resolved[batch.key]
    create = dict(batch.create or {})
    tags = dict(create.get("tags") or {})
    if create.get("launch_key"):  # the parent itself: found by its launch key, else made with its experiment
        try:
            return resolve_parent(tracker, create["experiment_name"], create["launch_key"], resolved, attempts)[1]
        except ParentNotCreated:
            exp_id = tracker.ensure_experiment(create["experiment_name"])
            run_id = create_run_once(tracker, exp_id, create.get("run_name") or "", tags, create.get("start_time"),
                                     launch_query(create["launch_key"]), attempts=attempts)
            resolved[f"experiment:{batch.key}"], resolved[batch.key] = exp_id, run_id
            return run_id
    if create.get("parent_key"):  # a child of a parent made late
        create["experiment_id"], create["parent_id"] = resolve_parent(
            tracker, create["experiment_name"], create["parent_key"], resolved, attempts)
    same = children_query(create.get("parent_id")).where({TRIAL_KEY_TAG: batch.key})
    run_id = create_run_once(tracker, create["experiment_id"], create.get("run_name") or "", tags,
                             create.get("start_time"), same, attempts=attempts, look_first=True)
    resolved[batch.key] = run_id
    return run_id


def deliver(tracker, batch: Batch, dedup: bool, attempts: int = 3, resolved: dict[str, str] | None = None) -> int:
    """Send one batch (the tracker splits it within its limits); returns the requests it asked for. With `dedup`
    (always for a batch whose run had to be found), points at or below the run's latest stored step of their key
    are dropped first. `attempts` per request."""
    dedup = dedup or not batch.run_id
    run_id = resolve_run(tracker, batch, {} if resolved is None else resolved, attempts)
    metrics = past_stored(tracker, run_id, batch.metrics, attempts) if dedup and batch.metrics else batch.metrics
    calls = int(dedup)
    if metrics or batch.params or batch.tags:
        calls += _log(tracker, run_id, metrics, clean(batch.params), clean(batch.tags), attempts)
    for path, text in batch.texts.items():  # an artifact small enough to wait in the spool (a spec, a record)
        retry(tracker.log_text, run_id, text, path, attempts=attempts)
        calls += 1
    if batch.terminate:
        retry(tracker.set_status, run_id, RunStatus(batch.terminate), batch.end_time, attempts=attempts)
        calls += 1
    return calls


def past_stored(tracker, run_id: str, points: list, attempts: int) -> list:
    """The points beyond the run's latest stored step of their key (a run's points of one key go out in step order)."""
    stored = retry(tracker.latest_steps, run_id, attempts=attempts)
    return [m for m in points if m[3] > stored.get(m[0], -1)]


def _log(tracker, run_id: str, points: list, params: dict, tags: dict, attempts: int) -> int:
    """tracker.log, retried; a retry first drops the points the store already holds: a tracker splits a large write
    into several requests, and those that went through before one failed are not sent again (MLflow's SQL store
    drops an exact repeat, a tracker need not)."""
    tried = False

    def once() -> int:
        nonlocal tried
        todo = past_stored(tracker, run_id, points, 1) if tried and points else points
        tried = True
        return tracker.log(run_id, todo, params, tags)

    return retry(once, attempts=attempts)


def replay_dir(directory: str | Path, tracker, deadline_s: float = 0.0, only: list | None = None,
               resolved: dict[str, str] | None = None, stop: threading.Event | None = None) -> tuple[int, int, int]:
    """Deliver every spooled batch under `directory` (or the files `only`), retrying transient failures until
    `deadline_s` from now, or until `stop` is set (Ctrl-C during a launch's close). Returns (batches delivered,
    their points, batches still undelivered). `resolved`: trial keys (and launch keys) whose runs are known,
    shared with a courier."""
    stop = stop or threading.Event()
    end = time.monotonic() + deadline_s
    sent = points = 0
    resolved = {} if resolved is None else resolved
    for path in only if only is not None else spool_files(directory):
        spool = Spool(path)
        batches = undelivered(path)
        spool.pending = len(batches)
        while batches:
            group = [batches[i] for i in head_group(batches)]
            wait = 1.0
            while True:
                try:
                    deliver(tracker, merged(group), dedup=True, resolved=resolved)
                    break
                except Exception as exc:  # noqa: BLE001
                    if not is_transient(exc) or time.monotonic() + wait > end or stop.wait(wait):
                        return sent, points, pending_points(directory)[0]
                    wait = min(MAX_BACKOFF_S, wait * 2)
            ids = {b.id for b in group}
            spool.mark(*ids)
            sent += len(group)
            points += sum(b.points for b in group)
            batches = [b for b in batches if b.id not in ids]
    return sent, points, 0


class Courier:
    """Ordered delivery of batches for one worker: straight through while the server answers, spooled and
    retried while it does not. The memory queue is always a prefix of the spool's undelivered batches, so
    batches go out in the order they were made (replay's step check relies on that).

    For a tracking server, `probe` (e.g. `server_answers`) is asked before the backlog is retried, and each
    request is tried `attempts` times: the courier's own backoff is the retry, so a server that is away or
    restarting costs a send a refused connection or a short probe, not MLflow's request timeout."""

    def __init__(self, tracker, spool_path: str | Path, max_points: int = 200_000, block_s: float = 0.0,
                 clock=time.monotonic, sleep=time.sleep, workers: int = 1, probe=None, attempts: int = 3):
        self.tracker = tracker
        self.probe, self.attempts = probe, attempts
        self.resolved: dict[str, str] = {}  # trial key -> run id, for batches of runs created late
        self.workers = workers  # concurrent requests for send_many (a tracking server: 8; a SQLite file: 1)
        self._threads = None
        self.spool = Spool(spool_path)
        self.queue: deque[Batch] = deque()
        self.on_disk_only = 0  # undelivered batches after the queue, held in the spool file only
        self.max_points = max_points
        self.block_s = block_s  # how long a full buffer may hold training up before it spills to disk only
        self.clock, self.sleep = clock, sleep
        self.backoff = 0.0
        self.next_try = 0.0
        self.failures = 0  # failed attempts
        self.calls = 0
        self.spooled_points = 0  # points that went through the spool (0 while the server answers)

    @property
    def queued_points(self) -> int:
        return sum(b.points for b in self.queue)

    @property
    def backlog(self) -> bool:
        return bool(self.queue) or self.on_disk_only > 0

    def _failed(self, exc: BaseException) -> None:
        if not is_transient(exc):
            raise exc
        self.failures += 1
        self.backoff = min(MAX_BACKOFF_S, max(1.0, self.backoff * 2))
        self.next_try = self.clock() + self.backoff

    def _refill(self) -> None:
        if self.queue or not self.on_disk_only:
            return
        rest = undelivered(self.spool.path)
        points = 0
        for batch in rest:
            if self.queue and points + batch.points > self.max_points:
                break
            self.queue.append(batch)
            points += batch.points
        self.on_disk_only = len(rest) - len(self.queue)

    def flush(self, budget_s: float | None = None) -> bool:
        """Retry the backlog, oldest first, if the backoff allows; each run's queued batches go out merged
        (spool.head_group). `budget_s`: start no delivery after that long (a training report's share), the rest
        waits for the next call. True when nothing is left undelivered."""
        if not self.backlog:
            return True
        if self.clock() < self.next_try:
            return False
        if self.probe is not None and not self.probe():
            self._failed(ConnectionError("the tracking server does not answer"))
            return False
        end = None if budget_s is None else self.clock() + budget_s
        while True:
            self._refill()
            if not self.queue:
                return True
            if end is not None and self.clock() >= end:
                return False  # not a failure: no backoff, the next report goes on where this one stopped
            queued = list(self.queue)
            group = [queued[i] for i in head_group(queued)]
            try:
                self.calls += deliver(self.tracker, merged(group), dedup=True, attempts=self.attempts,
                                      resolved=self.resolved)
            except Exception as exc:  # noqa: BLE001
                self._failed(exc)
                return False
            sent = {b.id for b in group}
            self.spool.mark(*sent)
            self.queue = deque(b for b in queued if b.id not in sent)
            self.backoff = 0.0

    def send(self, batch: Batch) -> None:
        self.send_many([batch])

    def send_many(self, batches: list[Batch]) -> None:
        """One batch per run (a pack's members at one report), after at most DRAIN_SLICE_S on the backlog: sent
        `workers` at a time while the server answers, since each costs a round trip the server spends mostly
        waiting on its database. The ones it does not take are held in their order; a run's later batches queue
        behind them."""
        if not self.flush(DRAIN_SLICE_S):
            for batch in batches:
                self._hold(batch)
            return
        if self.workers <= 1 or len(batches) <= 1 or len({b.run_id or b.key for b in batches}) < len(batches):
            for i, batch in enumerate(batches):
                calls, exc = self._attempt(batch)
                self.calls += calls
                if exc is not None:
                    self._failed(exc)
                    for held in batches[i:]:
                        self._hold(held)
                    return
            return
        if self._threads is None:
            from concurrent.futures import ThreadPoolExecutor

            self._threads = ThreadPoolExecutor(self.workers, thread_name_prefix="grokray-courier")
        outcomes = list(self._threads.map(self._attempt, batches))
        self.calls += sum(calls for calls, _ in outcomes)
        errors = [exc for _, exc in outcomes if exc is not None]
        for exc in errors:
            if not is_transient(exc):
                raise exc
        if errors:
            self._failed(errors[0])
            for batch, (_, exc) in zip(batches, outcomes, strict=True):
                if exc is not None:
                    self._hold(batch)

    def _attempt(self, batch: Batch) -> tuple[int, BaseException | None]:
        try:
            return deliver(self.tracker, batch, dedup=False, attempts=self.attempts, resolved=self.resolved), None
        except Exception as exc:  # noqa: BLE001 - judged by the caller, on the sending thread
            return 0, exc

    def _hold(self, batch: Batch) -> None:
        self.spool.append(batch)  # write-ahead: on disk before training goes on
        self.spooled_points += batch.points
        if self.on_disk_only:
            self.on_disk_only += 1
        else:
            self.queue.append(batch)
        self._relieve()

    def _relieve(self) -> None:
        """Over the memory bound: wait up to block_s for the server, then keep the newest batches on disk only."""
        end = self.clock() + self.block_s
        while self.queue and self.queued_points > self.max_points and self.clock() < end:
            self.sleep(max(0.0, min(self.next_try - self.clock(), end - self.clock())))
            self.flush(max(DRAIN_SLICE_S, end - self.clock()))
        while len(self.queue) > 1 and self.queued_points > self.max_points:
            self.queue.pop()
            self.on_disk_only += 1

    def hand_over(self) -> Path | None:
        """Try the backlog once; what is left becomes the driver's: the spool file is renamed *.done.jsonl, which
        the driver delivers in the background and at its close (run.launch), so a finished pack frees its slot at
        once instead of waiting out an outage. Returns the handed-over file, or None when nothing was left."""
        self.close(0.0)
        if not undelivered(self.spool.path):
            return None
        handed = self.spool.path.with_name(self.spool.path.name.removesuffix(".jsonl") + HANDED_OVER)
        self.spool.path.rename(handed)
        self.spool.path = handed
        return handed

    def close(self, wait_s: float = 0.0) -> int:
        """Retry the backlog for up to `wait_s`. Returns the points left only in the spool (0: all delivered)."""
        end = self.clock() + wait_s
        while not self.flush(max(DRAIN_SLICE_S, end - self.clock())) and self.clock() < end:
            self.sleep(max(0.05, min(self.next_try - self.clock(), end - self.clock())))
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None
        return sum(b.points for b in undelivered(self.spool.path)) if self.backlog else 0
