"""Run an atlas figure's pieces through `grokray run` / `grokray search`, skipping what MLflow already holds.

A piece is found again by its spec hash (what it trains, after scale and piece overrides) in the spec's MLflow
experiment: a finished, complete parent run is skipped, an interrupted one is resumed (Tuner.restore; the
search's study), anything else starts afresh. Each `grokray run` segment logs its wall seconds on the parent
(metric `atlas/wall_s`, timestamped at the segment's start) every HEARTBEAT_S while it runs, not only at its end,
so a piece resumed after its driver was killed still reports the compute the killed segment took, and the page
can say which pieces ran when.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ..drivers import DRIVERS
from ..errors import AtlasStopped, LaunchFinished, SpecError
from ..plan.estimate import BudgetUse, estimate_plan, plan_budget
from ..run.options import LaunchOptions
from ..tracking.history import measured_budget_use
from ..tracking.records import RunStatus
from ..tracking.schema import (
    ATLAS_PIECE_TAG,
    ATLAS_SCALE_TAG,
    ATLAS_USE_TAG,
    CODE_VERSION_TAG,
    CONFIGURATIONS_TAG,
    CONFIRM_PENDING,
    CONFIRM_TAG,
    KIND_TAG,
    PACKS_TAG,
    PHASE_COUNT_TAG,
    driver_of,
)
from ..tracking.store import Store
from .plan import Figure, PieceRun

WALL_METRIC = "atlas/wall_s"
ESTIMATE_METRIC = "atlas/estimate_s"  # the dry-run estimate, made just before the piece first ran
UPPER_METRIC = "atlas/estimate_upper_s"
SHARE_METRIC = "atlas/estimate_to_budget"  # share of members the estimate assumed would train their whole budget
TRAINED_METRIC = "atlas/estimate_budget_trained"  # the mean share of the budget it assumed they would train
HEARTBEAT_S = 30.0
STORED = {"missing": "not run", "skipped": "complete in MLflow", "incomplete": "not complete"}  # action -> words


@dataclass
class PieceRecord:
    name: str
    parent_run_id: str
    action: str  # ran, resumed or skipped (already complete)
    segments: list[tuple[float, float]] = field(default_factory=list)  # (start unix s, wall s) of each run
    code_version: str = ""
    estimate: tuple[float, float] | None = None  # (expected, upper bound) seconds, as estimated before it ran
    configurations: int = 0
    packs: int = 0
    use: tuple[float, float, str] | None = None  # the estimate's (to budget, budget trained, basis)

    @property
    def wall_s(self) -> float:
        return sum(w for _, w in self.segments)


def is_complete(run) -> bool:
    """Finished, and every configuration it counts has a phase (a search's pruned trials have none: it is
    complete once finished). The same test for a grid, an adaptive sweep and a search."""
    if run is None or run.status != RunStatus.FINISHED:
        return False
    tags = run.tags
    if driver_of(tags.get(KIND_TAG)).study:  # complete unless its confirmation stage is still owed
        return tags.get(CONFIRM_TAG) != CONFIRM_PENDING
    counted = sum(int(v) for k, v in tags.items() if k.startswith(PHASE_COUNT_TAG))
    return counted == int(tags.get(CONFIGURATIONS_TAG, -1))


def estimate_piece(piece: PieceRun, tracking_uri: str | None = None):
    """The dry-run estimate of one piece (a search: n_trials one-configuration trials, max_concurrent at once),
    with the share of members that train to their budget measured on the store's earlier runs where it can."""
    plan, slots = DRIVERS[piece.kind].plan(piece.spec)
    found = measured_budget_use(tracking_uri, piece.spec.name, plan_budget(plan))
    return estimate_plan(plan, slots=slots, use=BudgetUse(*found) if found else None)


def segments(store: Store, run_id: str) -> list[tuple[float, float]]:
    """(start, wall seconds) of each segment: the largest heartbeat logged with that start timestamp."""
    longest: dict[float, float] = {}
    for m in store.curve(run_id, WALL_METRIC):
        longest[m.timestamp_ms / 1000.0] = max(m.value, longest.get(m.timestamp_ms / 1000.0, 0.0))
    return sorted(longest.items())


class SegmentClock:
    """Logs a running segment's wall seconds on its parent run every `every` seconds. The parent of a fresh piece
    is made by `grokray run` after the segment starts, so the clock looks it up by spec hash until it appears."""

    def __init__(self, tracking_uri: str, piece: PieceRun, estimate: tuple[float, float],
                 use: tuple[float, float, str] | None = None, every: float = HEARTBEAT_S):
        self.tracking_uri, self.piece, self.every = tracking_uri, piece, every
        self.estimate, self.use = estimate, use
        self.start = time.time()
        self.run_id: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="atlas-segment-clock", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def log(self, store: Store, run_id: str) -> None:
        store.log_metric(run_id, WALL_METRIC, time.time() - self.start, timestamp_ms=int(self.start * 1000))
        if self.run_id is None:
            store.log_metric(run_id, ESTIMATE_METRIC, self.estimate[0])
            store.log_metric(run_id, UPPER_METRIC, self.estimate[1])
            if self.use is not None:
                store.log_metric(run_id, SHARE_METRIC, self.use[0])
                store.log_metric(run_id, TRAINED_METRIC, self.use[1])
                store.set_tag(run_id, ATLAS_USE_TAG, self.use[2])
            self.run_id = run_id

    def _beat(self) -> None:
        store = Store(self.tracking_uri)
        while not self._stop.wait(self.every):
            try:
                run_id = self.run_id
                if run_id is None:
                    parent = store.parent(self.piece.spec.name, self.piece.spec.hash())
                    if parent is None:
                        continue  # `grokray run` has not made it yet
                    run_id = parent.run_id
                self.log(store, run_id)
            except Exception:  # noqa: BLE001 - a missed heartbeat costs one point of a wall-time record, never the run
                continue


def _run_piece(piece: PieceRun, scale: str, tracking_uri: str, storage: str, resume: bool, progress) -> str:
    """Resume when MLflow holds an unfinished parent; if nothing is left to restore (killed before Tune saved
    its state, or the results directory is gone), or the parent closed as finished (its record stays as it is),
    start it afresh."""
    try:
        return _start_piece(piece, scale, tracking_uri, storage, resume, progress)
    except LaunchFinished:
        return _start_piece(piece, scale, tracking_uri, storage, False, progress)
    except SpecError as exc:
        if exc.field not in ("--resume", "search.study"):  # no launch to resume; or a study that exists already
            raise
        return _start_piece(piece, scale, tracking_uri, storage, not resume, progress)


def _start_piece(piece: PieceRun, scale: str, tracking_uri: str, storage: str, resume: bool, progress) -> str:
    options = LaunchOptions(resume=resume, tracking_uri=tracking_uri, storage=storage, progress=progress,
                            parent_tags={ATLAS_SCALE_TAG: scale, ATLAS_PIECE_TAG: piece.name})
    summary = DRIVERS[piece.kind].launch(piece.spec, options)
    if summary.interrupted and not summary.errored_trials:
        raise AtlasStopped(f"grokray: the atlas stopped in {piece.spec.name} piece {piece.name} (its parent run "
                           f"{summary.parent_run_id or '(not in MLflow yet)'} ended KILLED) and wrote no page; run "
                           "the same `grokray atlas` command again to resume it")
    if summary.errored_trials:
        raise RuntimeError(f"{piece.spec.name} piece {piece.name}: {summary.errored_trials} trials failed after "
                           f"retries; run the atlas again to resume it")
    if summary.undelivered_points or summary.undelivered_batches:
        raise RuntimeError(f"{piece.spec.name} piece {piece.name}: MLflow did not take {summary.undelivered_points} "
                           f"metric points; deliver them with `grokray replay {summary.undelivered_dir} "
                           f"--tracking-uri {tracking_uri}`, then run the atlas again")
    return summary.parent_run_id


def run_figure(figure: Figure, tracking_uri: str, storage: str, *, run: bool = True,
               progress: str = "auto", log=print) -> list[PieceRecord]:
    """Run (or skip, or resume) every piece of one figure; returns what each piece did and its wall time.
    run=False only looks up what is stored (a piece never run gives action 'missing', one interrupted or still
    running 'incomplete')."""
    store = Store(tracking_uri)
    results_dir = f"{storage.rstrip('/')}/atlas-{figure.scale}"  # one search journal per scale
    records = []
    for piece in figure.pieces:
        parent = store.parent(piece.spec.name, piece.spec.hash())
        if is_complete(parent) or not run:
            action = "missing" if parent is None else "skipped" if is_complete(parent) else "incomplete"
            log(f"[atlas] {figure.stem} {piece.name}: {STORED[action]}")
        else:
            action = "resumed" if parent is not None else "ran"
            stored = parent.metrics if parent is not None else {}
            use = None  # a resumed piece keeps the estimate made before it first ran
            if ESTIMATE_METRIC in stored:
                est = (stored[ESTIMATE_METRIC], stored[UPPER_METRIC])
            else:
                e = estimate_piece(piece, tracking_uri)
                est, use = (e.seconds, e.upper_seconds), (e.use.share, e.use.trained, e.use.basis)
            log(f"[atlas] {figure.stem} {piece.name}: {'resuming' if parent is not None else 'running'} "
                f"{len(piece.spec.points())} configurations (estimate {est[0] / 60:.1f} min)")
            with SegmentClock(tracking_uri, piece, est, use) as clock:
                if parent is not None:
                    clock.log(store, parent.run_id)  # a resumed piece's clock starts at once
                run_id = _run_piece(piece, figure.scale, tracking_uri, results_dir, parent is not None, progress)
            clock.log(store, run_id)
            parent = store.run(run_id)
        if parent is None:
            records.append(PieceRecord(piece.name, "", action))
            continue
        m, tags = parent.metrics, parent.tags
        est = (m[ESTIMATE_METRIC], m[UPPER_METRIC]) if ESTIMATE_METRIC in m else None
        use = (m[SHARE_METRIC], m.get(TRAINED_METRIC, m[SHARE_METRIC]), tags.get(ATLAS_USE_TAG, "")) \
            if SHARE_METRIC in m else None
        ran = segments(store, parent.run_id)
        if not ran and parent.start_ms and parent.end_ms:  # run by `grokray run`, not the atlas: its own duration
            ran = [(parent.start_ms / 1e3, (parent.end_ms - parent.start_ms) / 1e3)]
        records.append(PieceRecord(piece.name, parent.run_id, action, ran,
                                   tags.get(CODE_VERSION_TAG, ""), est,
                                   int(tags.get(CONFIGURATIONS_TAG, len(piece.spec.points()))),
                                   int(tags.get(PACKS_TAG, 0)), use))
    return records
