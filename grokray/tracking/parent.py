"""The parent run of one launch (a grid, an adaptive sweep, a search): opened, found again, resumed and closed here
for every driver, so each carries the same tags and each ends the same way.

Closing delivers what the packs left in the spool (a tracking outage), then writes the phase counts and the
status. If the server is still away, the parent's closing batch joins the spool too, and `close` says what is
left undelivered and where, so no caller can forget to report it.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from .client import (
    STREAM_PAGE,
    StoreAway,
    clean,
    code_version,
    find_parent,
    now_ms,
    phase_counts,
    retry,
    search_all,
    search_pages,
)
from .delivery import Courier, ParentNotCreated, deliver, replay_dir, resolve_parent
from .drivers import driver_died, driver_id
from .queries import children_query, parents_query
from .records import RunNotFound, RunRecord, RunStatus, ended_by_close, record_line
from .schema import (
    CODE_VERSION_TAG,
    CONFIGURATIONS_TAG,
    DRIVER_TAG,
    KIND_TAG,
    KINDS,
    LAUNCH_TAG,
    LOG_AXES_TAG,
    PARENT,
    PHASE_COUNT_METRIC,
    PHASE_TAG,
    REQUIRED_PARENT_TAGS,
    ROLE_TAG,
    RUNS_SUMMARY_ARTIFACT,
    RUNS_SUMMARY_TAG,
    SPEC_ARTIFACT,
    SPEC_HASH_TAG,
    SWEPT_TAG,
    TRIAL_KEY_TAG,
    phase_count_tags,
)
from .spool import LAUNCH_SPOOL_PREFIX, SPOOL_DIRNAME, Batch, Spool, pending_points
from .trackers import is_remote, open_tracker
from .uri import server_answers


@dataclass(frozen=True)
class Closed:
    """How a parent run ended: its phase counts and what the tracking server did not take."""

    status: str
    phase_counts: dict[str, int]
    undelivered_batches: int
    undelivered_points: int
    spool_dir: str
    duration_s: float = 0.0  # the parent run's own start to end, as MLflow's UI shows its duration
    counted: bool = False  # the children were paged to the end (each handed to on_record), not the packs' counts

    @property
    def undelivered(self) -> bool:
        return bool(self.undelivered_batches or self.undelivered_points)


def spool_dir_for(storage: str, launch_key: str) -> str:
    """Undelivered batches of one launch live beside the Tune results (shared storage on a cluster), else in
    ~/.grokray when the results go to a cloud URI. Named by the launch's key (a parent of an older grokray: by
    its run id), which exists before the server answers."""
    if "://" in storage:
        return str(Path.home() / ".grokray" / SPOOL_DIRNAME / launch_key)
    return str(Path(storage) / SPOOL_DIRNAME / launch_key)


class ParentRun:
    """One launch's parent run in one experiment of one tracking store.

    Every write goes through a Courier with its own spool file (`launch-<key>.jsonl`), as the packs' writes do:
    when the server is away at the launch, the parent is created when it answers, by the driver's background
    delivery, its close, or `grokray replay`, and its children find it by the launch key. Training never waits."""

    def __init__(self, uri: str, experiment_name: str, storage: str):
        self.uri = uri
        self.server = is_remote(uri)
        self.tracker = open_tracker(uri, spooled=True, prepare=True)
        self.experiment_name = experiment_name
        self.storage = storage
        self.experiment_id = ""  # known once the server answers
        self.run_id = ""
        self.launch_key = uuid.uuid4().hex
        self.code_version = code_version()
        self._create: dict | None = None  # what creating the parent needs, while the server is away
        self.started_ms: int | None = None  # when the parent run started (a resumed one: its first start)
        self._courier: Courier | None = None
        self._lock = threading.Lock()  # the driver's thread and its background delivery share the courier
        self.close_step = 0  # the step the close logs its phase counts at (a resumed launch's: one past the last)

    @property
    def spool_dir(self) -> str:
        return spool_dir_for(self.storage, self.launch_key)

    @property
    def courier(self) -> Courier:
        if self._courier is None:
            spool = Path(self.spool_dir) / f"{LAUNCH_SPOOL_PREFIX}{self.launch_key}.jsonl"
            self._courier = Courier(self.tracker, spool, probe=partial(server_answers, self.uri) if self.server
                                    else None, attempts=1 if self.server else 3)
        return self._courier

    def answers(self) -> bool:
        return not self.server or server_answers(self.uri)

    def open(self, kind: str, spec_hash: str, run_name: str, swept: list[str], log_axes: list[str], spec_text: str,
             tags: dict | None = None) -> str:
        """Create the parent with the tags every parent carries (schema.REQUIRED_PARENT_TAGS) and the resolved
        spec; with the server away, spool its creation and return "" (training starts at once)."""
        if kind not in KINDS:
            raise ValueError(f"unknown launch kind {kind!r}; allowed: {', '.join(KINDS)}")
        required = {ROLE_TAG: PARENT, KIND_TAG: kind, SPEC_HASH_TAG: spec_hash, CODE_VERSION_TAG: self.code_version,
                    SWEPT_TAG: list(swept), LOG_AXES_TAG: sorted(log_axes), LAUNCH_TAG: self.launch_key}
        all_tags = clean({**(tags or {}), **required, DRIVER_TAG: driver_id()})
        self.started_ms = now_ms()
        self._create = {"experiment_name": self.experiment_name, "launch_key": self.launch_key,
                        "run_name": run_name, "tags": all_tags, "start_time": self.started_ms}
        self._send(Batch("", texts={SPEC_ARTIFACT: spec_text}))
        return self.run_id

    def _send(self, batch: Batch) -> None:
        """One write to the parent, through its courier; a parent made late gets its id here."""
        with self._lock:
            if not self.run_id:
                batch.key, batch.create = self.launch_key, self._create
            self.courier.send(batch)
            self._learn_id()

    def _learn_id(self) -> None:
        if not self.run_id and self.launch_key in self.courier.resolved:
            self.run_id = self.courier.resolved[self.launch_key]
            self.experiment_id = self.courier.resolved[f"experiment:{self.launch_key}"]

    def run_of(self, key: str) -> str:
        """The run of configuration `key` where this launch's delivery made it late (an outage), else ""."""
        return self.courier.resolved.get(key, "")

    def deliver_backlog(self) -> None:
        """The background delivery's turn: retry the parent's own backlog (if the backoff allows)."""
        with self._lock:
            self.courier.flush()
            self._learn_id()

    def find(self, spec_hash: str, kind: str | None = None) -> RunRecord | None:
        """The latest parent of this spec hash (and kind) in this experiment, or None."""
        return find_parent(self.tracker, self.experiment_name, spec_hash, kind)

    def find_launch(self, launch_key: str) -> RunRecord | None:
        """The parent of one launch (by the key it was given at open), or None."""
        try:
            _, run_id = resolve_parent(self.tracker, self.experiment_name, launch_key, {})
        except ParentNotCreated:
            return None
        return retry(self.tracker.get_run, run_id)

    def active_run(self, run_id: str) -> RunRecord | None:
        """A run of this store by id, unless it was deleted or is in another store."""
        try:
            return self.tracker.get_run(run_id)
        except RunNotFound:
            return None

    def resume(self, run_id: str) -> None:
        """Continue a parent: RUNNING again, its launch's spool delivered first (what the last launch left)."""
        run = retry(self.tracker.get_run, run_id)
        self.run_id, self.experiment_id = run_id, run.experiment_id
        self.started_ms = run.start_ms or now_ms()
        self.launch_key = run.tags.get(LAUNCH_TAG) or run_id
        retry(self.tracker.set_status, run_id, RunStatus.RUNNING)
        retry(self.tracker.log, run_id, tags={DRIVER_TAG: driver_id()})
        counted = sorted(k for k in run.metrics if k.startswith(PHASE_COUNT_METRIC))
        if counted:  # each close's counts at a step of their own: close 0, then 1 after a resume, ...
            self.close_step = 1 + max(p.step for p in retry(self.tracker.curve, run_id, counted[0]))
        if RUNS_SUMMARY_TAG in run.tags:  # the table is of the last launch: stale until this one closes
            retry(self.tracker.delete_tag, run_id, RUNS_SUMMARY_TAG)
        replay_dir(self.spool_dir, self.tracker)

    def close_orphans(self, spec_hash: str, kind: str) -> tuple[list[RunRecord], list[RunRecord]]:
        """Parents of this experiment left RUNNING by a driver that died on this machine (SIGKILL, the OOM
        killer). Those of this spec and kind end KILLED, with their unfinished children, as their own close would
        have ended them; another spec's are left for its own --resume. Returns (closed, left); the caller says
        each. A store that is away, or a parent of a live or remote driver, is left alone."""
        with StoreAway() as away:
            exp_id = self.tracker.experiment_id(self.experiment_name)
            found = search_all(self.tracker, exp_id, parents_query(status=RunStatus.RUNNING)) if exp_id else []
        if away.happened:
            return [], []
        closed, left = [], []
        for run in found:
            if not driver_died(run.tags.get(DRIVER_TAG, "")):
                continue
            if (run.tags.get(SPEC_HASH_TAG), run.tags.get(KIND_TAG)) != (spec_hash, kind):
                left.append(run)
                continue
            for child in search_all(self.tracker, run.experiment_id, children_query(run.run_id)):
                if child.status == RunStatus.RUNNING:
                    retry(self.tracker.set_status, child.run_id, RunStatus.KILLED)
            retry(self.tracker.set_status, run.run_id, RunStatus.KILLED)
            closed.append(run)
        return closed, left

    def attach(self, run: RunRecord) -> None:
        """Point at an existing parent (read only: nothing is resumed or delivered), e.g. to read its children."""
        self.run_id, self.experiment_id = run.run_id, run.experiment_id

    def _child_runs(self) -> list[RunRecord]:
        if not self.run_id:
            raise ParentNotCreated(f"the parent of launch {self.launch_key} is not in the store yet")
        return search_all(self.tracker, self.experiment_id, children_query(self.run_id))

    def children(self) -> list[RunRecord]:
        """This launch's trial runs, as plain records."""
        return self._child_runs()

    def read_texts(self, folder: str) -> list[str]:
        """The text artifacts under `folder` of the parent, in path order."""
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            return [self.tracker.download(self.run_id, path, d).read_text()
                    for path in sorted(retry(self.tracker.artifact_paths, self.run_id, folder))]

    def end_unfinished_children(self, tag: str) -> int:
        """Children still RUNNING without a phase (a scheduler stopped them early) get `tag` and end KILLED."""
        ended = 0
        for run in self._child_runs():
            if run.status == RunStatus.RUNNING and PHASE_TAG not in run.tags:
                retry(self.tracker.log, run.run_id, tags={tag: "true"})
                retry(self.tracker.set_status, run.run_id, RunStatus.KILLED)
                ended += 1
        return ended

    def _child_pages(self, packs: list[str] | None = None):
        """The children, a page at a time. With `packs` (the pack id of every trial of the launch) pack by pack:
        MLflow's SQL store pages with OFFSET, so each page of the whole parent sorts every child again (the close
        of an 8·10^4-run launch took 19 minutes), while one pack is a few hundred runs."""
        if packs is None:
            yield from search_pages(self.tracker, self.experiment_id, children_query(self.run_id), size=STREAM_PAGE)
            return
        for pack in dict.fromkeys(packs):
            yield from search_pages(self.tracker, self.experiment_id, children_query(self.run_id, pack),
                                    size=STREAM_PAGE)

    def _end_and_count_children(self, table: bool, on_page=None, on_record=None, packs: list[str] | None = None
                                ) -> dict[str, int]:
        """One pass over the children, a page at a time (a launch of 10^5 runs holds one page): a child still
        RUNNING ends here (FINISHED if it has its phase: a kill came between its tag and its end), its phase is
        counted, and with `table` (every child complete in the store) it joins the launch's runs table, which
        goes up with the tag that says it is complete. `on_record(record)` gets each child as it ends (the close's
        figure is drawn from them), `on_page()` is called after each page (a stop's beat). `packs`: see
        _child_pages; a child of a pack not named there is left out, so only a caller that knows them all names
        them."""
        import gzip
        import tempfile

        if not self.run_id:
            raise ParentNotCreated(f"the parent of launch {self.launch_key} is not in the store yet")
        counts: dict[str, int] = {}
        rows = 0
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / Path(RUNS_SUMMARY_ARTIFACT).name
            with gzip.open(path, "wt", compresslevel=6) as out:
                for page in self._child_pages(packs):
                    for rec in page:
                        if rec.status == RunStatus.RUNNING:
                            rec = ended_by_close(rec, now_ms())
                            retry(self.tracker.set_status, rec.run_id, RunStatus(rec.status), rec.end_ms)
                        out.write(record_line(rec))
                        if on_record is not None:
                            on_record(rec)
                    for phase, n in phase_counts(page).items():
                        counts[phase] = counts.get(phase, 0) + n
                    rows += len(page)
                    if on_page is not None:
                        on_page()
            if table:
                retry(self.tracker.log_artifact, self.run_id, path, str(Path(RUNS_SUMMARY_ARTIFACT).parent))
                retry(self.tracker.log, self.run_id, tags={RUNS_SUMMARY_TAG: str(rows)})
        return dict(sorted(counts.items()))

    def count_children(self, on_record=None) -> dict[str, int]:
        """A closed launch's children counted again and its runs table written: what `grokray replay` does for a
        launch whose close could not reach the store. `on_record` as in the close."""
        return self._end_and_count_children(table=True, on_record=on_record)

    def delete_unfinished(self, keys: set[str]) -> int:
        """Delete the children of these trial keys that never got a phase (a round that is started again would
        otherwise leave them beside the runs it makes). Returns how many."""
        stale = [r.run_id for r in self._child_runs() if PHASE_TAG not in r.tags and r.tags.get(TRIAL_KEY_TAG) in keys]
        for run_id in stale:
            retry(self.tracker.delete_run, run_id)
        return len(stale)

    def set_tag(self, key: str, value) -> None:
        self._send(Batch(self.run_id, tags=clean({key: value})))

    def log_text(self, text: str, path: str) -> None:
        self._send(Batch(self.run_id, texts={path: text}))

    def close(self, status: str, wait_s: float, fallback_counts: dict[str, int] | None = None,
              configurations: int | None = None, metrics: dict[str, float] | None = None,
              on_page=None, on_record=None, packs: list[str] | None = None,
              stop: threading.Event | None = None) -> Closed:
        """Deliver the spool (the parent's own batches first), then phase counts (from the children's tags),
        `configurations`, `metrics` and the status. With the server still away, the counts come from
        `fallback_counts` (what Tune reported) and the closing batch is spooled for `grokray replay`.
        `packs`: every pack id of the launch, when the caller knows them all (the children are read pack by pack).
        `stop`: set to end the wait for the spool's delivery (what is left stays for `grokray replay`)."""
        with self._lock:
            self.courier.close(0.0)
        replay_dir(self.spool_dir, self.tracker, deadline_s=wait_s, resolved=self.courier.resolved, stop=stop)
        self._learn_id()
        counts: dict[str, int] | None = None
        with StoreAway():
            counts = self._end_and_count_children(table=not any(pending_points(self.spool_dir)), on_page=on_page,
                                                  on_record=on_record, packs=packs)
        measured = counts is not None
        counts = dict(sorted((counts if measured else fallback_counts or {}).items()))
        values = {f"{PHASE_COUNT_METRIC}{p}": float(n) for p, n in counts.items()} | (metrics or {})
        tags = phase_count_tags(counts) | ({CONFIGURATIONS_TAG: str(configurations)} if configurations is not None
                                           else {})
        end = now_ms()
        batch = Batch(self.run_id, [[k, v, end, self.close_step] for k, v in values.items()], {}, tags, status,
                      end_time=end)
        if not self.run_id:
            batch.key, batch.create = self.launch_key, self._create
        delivered = False
        if measured:  # the server answered a moment ago: send the closing batch as any other
            with StoreAway():
                deliver(self.tracker, batch, dedup=False, attempts=6)
                delivered = True
        if not delivered:  # after the parent's other batches, in its own spool file
            Spool(self.courier.spool.path).append(batch)
        batches, points = pending_points(self.spool_dir)
        return Closed(status, counts, batches, points, self.spool_dir, (end - (self.started_ms or end)) / 1e3,
                      counted=measured)


def missing_parent_tags(tags: dict[str, str]) -> list[str]:
    """The required tags a parent run lacks (the contract test checks every driver's parent against it)."""
    return [t for t in REQUIRED_PARENT_TAGS if t not in tags]
