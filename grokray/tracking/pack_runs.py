"""Worker side: the child runs of one pack's members, opened by the worker that trains the pack.

A retried or resumed pack finds each member's run by its trial key and logs only the curve points beyond the
last step already stored. If the tracking server is away when the pack opens, the pack trains anyway: runs it
could not find or create are found or created by the courier when the server is back (delivery.resolve_run),
and their first batches are deduplicated against what the store holds.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from ..phases import counted_phase
from ..spec.blocks import only_known_fields
from .client import StoreAway, clean, counted_phase_of, create_run_once, now_ms, retry, search_all
from .delivery import Courier, replay_dir, resolve_parent
from .queries import children_query
from .records import RunRecord, RunStatus
from .schema import (
    CODE_VERSION_TAG,
    CONFIGURATION,
    COUNTED_TAG,
    ENDED_TAG,
    LOG_AXES_TAG,
    MODEL_TAG,
    NODE_TAG,
    PACK_ID_TAG,
    PHASE_TAG,
    RESUMES_TAG,
    ROLE_TAG,
    SPEC_HASH_TAG,
    STARTS_TAG,
    SWEPT_TAG,
    TASK_TAG,
    TRIAL_KEY_TAG,
    flatten,
)
from .spool import HANDED_OVER, SPOOL_DIRNAME, Batch, spool_files, undelivered
from .trackers import is_remote, open_tracker
from .uri import server_answers

OPEN_ATTEMPTS = 3  # a pack that finds the server away at open trains on; its runs are made when it is back
# Requests a worker keeps in flight to a tracking server (run creation, a report's batches): the server spends
# most of a request waiting on its database, so a pack of many members is bound by round trips, not by CPU.
# A SQLite file takes one writer at a time: 1.
SERVER_CONCURRENCY = 8


@dataclass(frozen=True)
class RunTarget:
    """Where a pack's runs go and how they are delivered: the tracking half of a trial's context."""

    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    spec_hash: str
    code_version: str
    swept: tuple[str, ...] = ()
    log_axes: tuple[str, ...] = ()
    spool_dir: str = ""  # undelivered batches (default: ~/.grokray/undelivered/<parent>)
    delivery_wait_s: float = 60.0  # unused by the worker now (it hands its backlog over); kept so that a Tune
    # experiment saved by an earlier grokray, whose trials carry it, still restores
    buffer_points: int = 200_000  # metric points held in memory while the server is away
    buffer_block_s: float = 0.0  # how long a full buffer may hold training up before it spills to disk only
    concurrency: int = SERVER_CONCURRENCY  # requests in flight to a tracking server
    parent_key: str = ""  # the launch's key: how a pack finds a parent the server was away for (parent_run_id "")
    experiment_name: str = ""

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, raw: dict) -> RunTarget:
        only_known_fields(cls, raw, "run-target")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()})


class MemberRun:
    """One configuration's child run. run_id is "" until the run is found or created (see the module doc)."""

    def __init__(self, key: str, run_id: str, last_step: dict[str, int], params: dict | None = None,
                 tags: dict | None = None, create: dict | None = None):
        self.key = key
        self.run_id = run_id
        self.last_step = last_step  # metric key -> last step stored
        self.pending_params = params or {}  # sent with its first batch
        self.pending_tags = tags or {}
        self.create = create  # what delivery needs to make the run, while run_id is ""
        self.finished = False  # its summaries, phase tag and end are sent (or it was found finished)
        self.sealed = False  # found finished in the store: nothing of it is sent again
        self.phase = ""  # a sealed run's phase, as stored, and what it counts as (grokray.phases.counted_phase)
        self.counted_as = ""

    def batch(self, metrics: list | None = None, tags: dict | None = None, terminate: str | None = None,
              end_time: int | None = None) -> Batch:
        """What this run sends next; the params and tags it has not sent yet go with it, once."""
        batch = Batch(self.run_id, metrics or [], clean(self.pending_params),
                      clean({**self.pending_tags, **(tags or {})}), terminate, key=self.key,
                      create=None if self.run_id else self.create, end_time=end_time)
        self.pending_params, self.pending_tags = {}, {}
        return batch


class PackTracker:
    """Child runs of the members of one pack."""

    def __init__(self, target: RunTarget, pack: dict):
        self.target = target
        self.pack = pack
        server = is_remote(target.tracking_uri)
        self.workers = target.concurrency if server else 1
        self.tracker = open_tracker(target.tracking_uri, spooled=True)  # a server away: the courier spools
        self.runs: list[MemberRun] = []
        self.experiment_id, self.parent_id = target.experiment_id, target.parent_run_id  # "" until the server answers
        self.started_ms = now_ms()  # the members' runs start with the pack, wherever and whenever they are made
        self._calls = 0
        self.seconds = 0.0  # time spent in the tracker's calls from this worker
        self.spool_dir = Path(target.spool_dir or Path.home() / ".grokray" / SPOOL_DIRNAME /
                              (target.parent_key or target.parent_run_id))
        self.courier = Courier(self.tracker, self.spool_dir / f"{pack['pack_id']}-{os.getpid()}-{now_ms()}.jsonl",
                               max_points=target.buffer_points, block_s=target.buffer_block_s, workers=self.workers,
                               probe=partial(server_answers, target.tracking_uri) if server else None,
                               attempts=1 if server else 3)

    @property
    def run_ids(self) -> dict[str, str]:
        """Trial key -> run id of every member whose run exists (a search links its Optuna trial to it)."""
        return {r.key: r.run_id or self.courier.resolved.get(r.key, "") for r in self.runs
                if r.run_id or r.key in self.courier.resolved}

    @property
    def all_finished(self) -> bool:
        """Every member's run was found finished: a resumed pack whose work is done (its last report to Tune was
        lost to the stop) trains nothing again."""
        return bool(self.runs) and all(r.sealed for r in self.runs)

    @property
    def calls(self) -> int:
        """Tracker requests made (the benchmark reports them)."""
        return self._calls + self.courier.calls

    def _timed(self, fn, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0

    def open(self, node_id: str = "", restored_from: int = 0, params_now: bool = False) -> None:
        """Find or make the members' runs. `restored_from`: the step the pack's checkpoint continues from (0: it
        trains from the start, so a run found with curves counts one more start). `params_now`: send each run's
        params at once instead of with its first curve points (a request a run more): for a trial that its
        scheduler may stop at its first report (a search's ASHA), before any curve point leaves the worker, so
        that its run still says which setting it was."""
        self._timed(self._open, node_id, restored_from)
        if params_now:
            self._timed(self._send_params)

    def _send_params(self) -> None:
        self.courier.send_many([run.batch() for run in self.runs if run.pending_params])

    def _open(self, node_id: str, restored_from: int) -> None:
        target = self.target
        earlier = [p for p in spool_files(self.spool_dir) if p.name.startswith(f"{self.pack['pack_id']}-")
                   and not p.name.endswith(HANDED_OVER)]  # handed-over files are the driver's to deliver
        for path in earlier:  # an earlier attempt of this pack spooled batches: one try before reading steps
            replay_dir(path.parent, self.tracker, only=[path])
        with StoreAway() as away:
            if not self.parent_id:  # the driver's server was away at launch: is the parent there now?
                self.experiment_id, self.parent_id = resolve_parent(
                    self.tracker, target.experiment_name, target.parent_key, self.courier.resolved, OPEN_ATTEMPTS)
            existing = search_all(self.tracker, self.experiment_id,
                                  children_query(self.parent_id, self.pack["pack_id"]), attempts=OPEN_ATTEMPTS)
            self._calls += 1
        if away.happened:
            self.runs = [self._deferred(m, node_id) for m in self.pack["members"]]  # found or made at delivery
            return
        by_key = {r.tags.get(TRIAL_KEY_TAG): r for r in existing}
        new = [m for m in self.pack["members"] if m["key"] not in by_key]
        if self.workers > 1 and len(new) > 1:  # a fresh pack of many members: its runs created concurrently
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(self.workers, thread_name_prefix="grokray-open") as pool:
                created = dict(zip((m["key"] for m in new), pool.map(lambda m: self._create(m, node_id), new),
                                   strict=True))
        else:
            created = {m["key"]: self._create(m, node_id) for m in new}
        for member in self.pack["members"]:
            found = by_key.get(member["key"])
            self.runs.append(created[member["key"]] if found is None
                             else self._reopen(found, member, node_id, restored_from))

    def _tags(self, member: dict, node_id: str) -> dict:
        cfg, target = member["config"], self.target
        return clean({ROLE_TAG: CONFIGURATION, MODEL_TAG: cfg["model"]["name"],
                      TASK_TAG: cfg["task"]["name"], TRIAL_KEY_TAG: member["key"], PACK_ID_TAG: self.pack["pack_id"],
                      SPEC_HASH_TAG: target.spec_hash, CODE_VERSION_TAG: target.code_version,
                      SWEPT_TAG: list(target.swept), LOG_AXES_TAG: list(target.log_axes), NODE_TAG: node_id,
                      STARTS_TAG: 1, **member.get("tags", {})})

    def _deferred(self, member: dict, node_id: str) -> MemberRun:
        create = {"experiment_id": self.experiment_id, "run_name": member["name"],
                  "tags": self._tags(member, node_id), "start_time": self.started_ms, "parent_id": self.parent_id}
        if not self.parent_id:  # delivery finds the parent by the launch's key first
            create |= {"experiment_name": self.target.experiment_name, "parent_key": self.target.parent_key}
        return MemberRun(member["key"], "", {}, flatten(member["config"]), create=create)

    def _create(self, member: dict, node_id: str) -> MemberRun:
        with StoreAway() as away:
            same = children_query(self.parent_id, self.pack["pack_id"]).where({TRIAL_KEY_TAG: member["key"]})
            run_id = create_run_once(self.tracker, self.experiment_id, member["name"], self._tags(member, node_id),
                                     self.started_ms, same, attempts=OPEN_ATTEMPTS)
        if away.happened:
            return self._deferred(member, node_id)
        self._calls += 1
        return MemberRun(member["key"], run_id, {}, flatten(member["config"]))

    def _reopen(self, found: RunRecord, member: dict, node_id: str, restored_from: int) -> MemberRun:
        """A retry or resume: the run's stored steps (one request) and RUNNING again. A run that finished is left
        as it is (nothing of it is sent again); a continued run counts a resume, a run trained again from step 0
        a start."""
        run_id = found.run_id
        moved = _moved_tags(found, member)
        if found.name != member["name"]:  # the trial that finishes it names it
            with StoreAway():
                retry(self.tracker.rename_run, run_id, member["name"], attempts=OPEN_ATTEMPTS)
        if PHASE_TAG in found.tags:  # ended before the pack was stopped: nothing more to send but its new trial
            if moved:
                retry(self.tracker.log, run_id, tags=moved, attempts=OPEN_ATTEMPTS)
            run = MemberRun(member["key"], run_id, {})
            run.finished = run.sealed = True
            run.phase = found.tags[PHASE_TAG]
            run.counted_as = counted_phase_of(found)
            return run
        last = {}  # unknown while the store is away: the first batches are deduplicated against it instead
        with StoreAway():
            last = retry(self.tracker.latest_steps, run_id, attempts=OPEN_ATTEMPTS) if found.metrics else {}
            self._calls += 1
            if found.status != RunStatus.RUNNING:
                retry(self.tracker.set_status, run_id, RunStatus.RUNNING, attempts=OPEN_ATTEMPTS)
                self._calls += 1
        counter = RESUMES_TAG if restored_from > 0 or not found.metrics else STARTS_TAG
        tags = {counter: str(int(found.tags.get(counter, "1" if counter == STARTS_TAG else "0")) + 1),
                **({NODE_TAG: node_id} if node_id else {}), **moved}
        pending = {} if found.params else flatten(member["config"])  # died before its first batch
        return MemberRun(member["key"], run_id, last, pending, tags)

    def log_curves(self, results) -> None:
        """Curve points past the last stored step of each series, one log_batch per <= 1000 points."""
        self._timed(self._log, results, None)

    def finish(self, results, thresholds: list[float], ended: list[float | None]) -> None:
        """Curve points of every member; for each member that stopped (`ended`: the time.time() it stopped, else
        None) and is not finished yet, also its summary metrics and phase tag, and its run ends at that time."""
        self._timed(self._log, results, thresholds, ended)

    def log_states(self, states: list, name: str = "final_state.pt") -> None:
        """Each member's final state (a dict of tensors, or None) as the artifact `name` of its child run."""
        self._timed(self._log_states, states, name)

    def _log_states(self, states: list, name: str) -> None:
        import tempfile

        import torch

        for run, state in zip(self.runs, states, strict=True):
            if state is None or not run.run_id:
                continue  # an artifact cannot wait in the spool: a run the outage kept from being made has none
            with tempfile.TemporaryDirectory() as d:
                path = Path(d) / name
                torch.save(state, path)
                with StoreAway():
                    retry(self.tracker.log_artifact, run.run_id, path)
            self._calls += 1

    def _log(self, results, thresholds, ended=None) -> None:
        now = now_ms()
        batches = []
        for i, (run, result) in enumerate(zip(self.runs, results, strict=True)):
            if run.sealed:
                continue
            run.run_id = run.run_id or self.courier.resolved.get(run.key, "")
            metrics = []
            steps = result.curve.get("step", [])
            for key, values in result.curve.items():
                if key == "step":
                    continue
                last = run.last_step.get(key, -1)
                for step, value in zip(steps, values, strict=True):
                    if step > last and value is not None and math.isfinite(value):
                        metrics.append([key, float(value), now, int(step)])
                        run.last_step[key] = step
            tags, terminate, end_ms = {}, None, None
            if ended is not None and ended[i] is not None and not run.finished:
                summary = result.summary(thresholds[i])
                metrics += [[k, float(v), now, int(result.steps_run)] for k, v in summary.items()
                            if v is not None and math.isfinite(float(v))]
                counted = counted_phase(result.phase, result.ideal_val_acc, thresholds[i])  # undecodable: said
                terminate, end_ms = RunStatus.FINISHED.value, int(ended[i] * 1000)
                tags = {PHASE_TAG: result.phase, ENDED_TAG: str(end_ms),
                        **({COUNTED_TAG: counted} if counted != result.phase else {})}
                run.finished = True
            if metrics or tags or run.pending_tags or run.pending_params or terminate:
                batches.append(run.batch(metrics, tags, terminate, end_ms))
        self.courier.send_many(batches)

    def close(self) -> int:
        """One try at what an outage held back; the rest is handed to the driver (Courier.hand_over), so the
        pack's slot is free at once. Returns the metric points handed over (0: everything delivered)."""
        handed = self._timed(self.courier.hand_over)
        return sum(b.points for b in undelivered(handed)) if handed else 0


def _moved_tags(found: RunRecord, member: dict) -> dict[str, str]:
    """The member's own tags (a search's trial number) where the run it reopens holds others: a search resumed
    after a stop re-runs its interrupted trials under new numbers, and their runs must point at the trial that
    finished them, not at the failed one (its name moves too: Tracker.rename_run)."""
    want = clean(member.get("tags", {}))
    return {k: v for k, v in want.items() if found.tags.get(k) != v}
