"""THE launch layer: every driver (grid, adaptive, search) goes through `Launch`, so what it guarantees holds for
all of them: the GPU checks before anything starts, Ray started and stopped, the parent run opened (or resumed)
with the same tags, one typed TrialContext for every trial (with the outage spool), the progress line, and the
close that replays the spool and says what was not delivered.

A driver is a strategy that hands `Launch` its rounds of trials:

    with Launch(spec, options, kind="grid") as launch:
        launch.open_parent("name sweep", swept, log_axes)
        launch.fit(launch.tuner("name", packs=plan.pack_dicts(), total_configs=..., total_work=...))
        summary = launch.close(configurations=plan.n_configs)
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from concurrent.futures import wait
from dataclasses import dataclass, field
from functools import partial

import ray
from ray import tune

from ..errors import LaunchFinished, SpecError
from ..spec.build import Spec
from ..spec.wire import store_packs
from ..tracking.background import BackgroundDelivery
from ..tracking.client import StoreAway, find_parent
from ..tracking.drivers import dead_driver_pid, left_by_dead_driver
from ..tracking.pack_runs import RunTarget
from ..tracking.parent import ParentRun
from ..tracking.records import RunStatus
from ..tracking.schema import CONFIGURATIONS_TAG, DRIVERS
from ..tracking.spool import pending_points
from ..tracking.trackers import is_remote, open_tracker
from ..tracking.uri import resolve_tracking_uri, server_answers
from ..user_code import code_paths
from ..worker.context import TrialContext
from ..worker.trainable import train_pack
from .cluster import (
    busy_machine_note,
    check_cluster_gpus,
    check_gpu_request,
    gpu_free_bytes,
    idle_gpu_note,
    quiet_tune_resume_hint,
    resolve_storage,
    slots,
    start_ray,
    starts_private_ray,
)
from .options import LaunchOptions, LaunchSummary, launch_status
from .progress import DiskWatch, ProgressLine
from .report import closing_runs, launch_title, report_on_parent
from .signals import ignore_stops, stop_beat, stops_end, take_stops
from .warm import driver_imports_in_background


def name_of(config: dict) -> str:
    """A search trial is named by its Optuna number, a pack by its id."""
    number = config.get("optuna_trial")
    return f"optuna-{number}" if number is not None else (config.get("pack") or {}).get("pack_id", "?")


def trial_name(trial) -> str:
    return name_of(trial.config)


def trial_dirname(trial) -> str:
    return f"{trial_name(trial)}_{trial.trial_id}"


def error_reason(error: BaseException) -> str:
    """The exception a trial raised, as one line (Tune wraps it in a traceback of the worker)."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    causes = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", ln)]
    return (causes[-1] if causes else lines[-1] if lines else type(error).__name__)[:500]


@dataclass
class Round:
    """What one Tune run of a launch gave back."""

    results: list = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # trial name -> why it failed
    unfinished: int = 0  # trials that ended without finishing their pack (stopped, or Ray went away)
    stopped: bool = False  # a stop signal ended it (a scheduler's early stops, ASHA's, do not)
    member_phases: dict[str, str] = field(default_factory=dict)  # trial key -> phase, of every finished member

    @property
    def errored(self) -> int:
        return len(self.errors)


def replace_restored_callbacks(tuner: tune.Tuner, callbacks: list) -> bool:
    """A restored Tuner's RunConfig holds the first launch's callbacks, pickled: its --progress, or a ProgressLine
    of an older grokray that no longer unpickles whole; this launch's own replace them. Ray 2.60 has no public
    way (Tuner.restore takes no run_config), so this is grokray's one use of Tune's private local tuner. Under Ray
    Client there is none: the restored callbacks are kept (False). tests/test_run_resume.py fails by name if
    Ray changes it."""
    local = getattr(tuner, "_local_tuner", None)
    if local is None:
        return False
    local.get_run_config().callbacks = callbacks
    return True


def any_parent(run) -> bool:
    """The `resumable` of a driver that can continue any interrupted parent of its spec (adaptive)."""
    return True


class Launch:
    """One launch of one spec: Ray, the parent run, its rounds of Tune runs, its close."""

    def __init__(self, spec: Spec, options: LaunchOptions, kind: str, default_report_s: float = 30.0,
                 resumable=None):
        """`resumable(parent run)`: whether --resume can continue that launch (a grid: Tune can restore it), for a
        driver that resumes its parent (resume_parent); None for one that resumes its own way (a search grows its
        study, and a finished search can be resumed)."""
        options.validate()
        self.spec, self.options, self.kind, self.resumable = spec, options, kind, resumable
        self.min_report_s = default_report_s if options.min_report_s is None else options.min_report_s
        self.storage = resolve_storage(options.storage)
        self.uri = resolve_tracking_uri(options.tracking_uri)
        self.t_start = time.time()
        self.timings: dict[str, float] = {}
        self.rounds: list[Round] = []
        self.experiment_path = ""
        self.started_ray = False
        self.parent: ParentRun | None = None
        self.gpu_free: int | None = None
        self.delivery: BackgroundDelivery | None = None  # started with the first Tune run
        self.notes: list[str] = []  # said when training starts: a --resume that finds nothing to do says none
        self.closed = False

    # -- Ray up and down -----------------------------------------------------------------------------------------
    def __enter__(self) -> Launch:
        check_gpu_request(self.spec, self.options)  # before Ray starts or MLflow is written
        self._resume_asked_early()
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0 the legacy engine prints nothing
        os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
        # MLflow is imported and its store opened (a new SQLite file runs the schema migrations) while Ray starts,
        # whose seconds go mostly to waiting for its processes: ~3 s of a laptop sweep's start hidden.
        ready = driver_imports_in_background(self.uri, then=partial(ParentRun, self.uri, self.spec.name,
                                                                     self.storage))
        try:
            # the load of other jobs, measured before our own trials add to it (a cluster's load is not ours to see)
            busy = busy_machine_note() if starts_private_ray(self.options) else None
            self.started_ray = start_ray(self.options)
            self.timings["ray_start"] = time.time() - self.t_start
            check_cluster_gpus(self.spec)
            self.notes = [note for note in (busy, idle_gpu_note(self.spec)) if note]
            self.gpu_free = gpu_free_bytes(self.spec)
            self.parent = ready.result()
        except BaseException:
            # no thread outlives a launch that did not start: the warm-up is still opening the store (a new SQLite
            # file's migrations log as they go), and a caller that goes on (a notebook, a test) would hear it later
            wait([ready])
            self._stop_ray()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.delivery is not None:
            self.delivery.stop()
        if exc_type is not None and not self.closed and self.parent is not None and self.parent.run_id:
            # The launch broke before its close (Ray's GCS died, a driver bug): its records still end KILLED,
            # what it spooled is kept, and the user is told how to go on.
            try:
                self.parent.close(RunStatus.KILLED, 0.0)
            except Exception:  # noqa: BLE001, S110 - the original error is the one to show
                pass
            print(f"grokray: the {self.kind} launch stopped ({exc_type.__name__}); continue it with: "
                  f"{self.options.resume_command or '--resume'}", file=sys.stderr)
        self._stop_ray()
        take_stops()  # the record is closed and Ray is down: a stop signal stops the process again

    def _stop_ray(self) -> None:
        if self.started_ray:
            t0 = time.time()
            ray.shutdown()
            self.started_ray = False
            self.timings["ray_stop"] = time.time() - t0

    @property
    def slots(self) -> int:
        return slots(self.spec)

    # -- the parent run ------------------------------------------------------------------------------------------
    def open_parent(self, run_name: str, swept: list[str], log_axes: list[str], tags: dict | None = None) -> str:
        closed, left = self.parent.close_orphans(self.spec.hash(), self.kind)
        for orphan in closed:
            print(f"grokray: the {self.kind} launch {launch_title(self.spec.name, orphan.start_ms)} (parent run "
                  f"{orphan.run_id}) was left RUNNING by a driver that died; closed it as KILLED (`--resume` would "
                  "have continued it)", file=sys.stderr)
        for orphan in left:  # another spec's launch in this experiment: its own --resume closes it
            print(left_by_dead_driver(orphan), file=sys.stderr)
        spec_text = self.spec.yaml()
        return self.parent.open(self.kind, self.spec.hash(), run_name, swept, log_axes, spec_text,
                                {**self.options.parent_tags, **(tags or {})})

    def _resume_asked_early(self) -> None:
        """--resume's question asked before Ray starts or a file is written: nothing to continue, or a launch that
        finished, is said at once (it came after Ray's start and 63 files). A server that does not answer now is
        asked again by the launch, which waits out an outage."""
        if not self.options.resume or self.resumable is None or (is_remote(self.uri)
                                                                 and not server_answers(self.uri)):
            return
        self._resumable_parent(find_parent(open_tracker(self.uri), self.spec.name, self.spec.hash(), self.kind))

    def resume_parent(self):
        """The latest parent of this spec and kind, running again (see _resumable_parent)."""
        run = self._resumable_parent(self.parent.find(self.spec.hash(), self.kind))
        if pid := dead_driver_pid(run):  # said, so a user who thought it was still running knows it was not
            print(f"grokray: continuing the {self.kind} launch {run.name!r} (parent run {run.run_id[:8]}), left "
                  f"RUNNING by a driver that died (pid {pid})", file=sys.stderr)
        self.parent.resume(run.run_id)
        return run

    def _resumable_parent(self, run):
        """`run`, the latest parent of this spec and kind, if --resume can continue it; SpecError('--resume') when
        there is none (or `resumable(run)` refuses it); LaunchFinished, touching nothing, when it closed as finished
        (a finished launch's record is never rewritten)."""
        if run is not None and run.status == RunStatus.FINISHED:
            ended = time.strftime("%Y-%m-%d %H:%M", time.localtime((run.end_ms or 0) / 1e3))
            configs = run.tags.get(CONFIGURATIONS_TAG, "?")
            raise LaunchFinished(f"grokray: the {self.kind} launch of {self.spec.name!r} finished at {ended} "
                                 f"({configs} configurations, parent run {run.run_id}): --resume has nothing to "
                                 "continue and changed nothing; run without --resume for a new launch", run.run_id)
        if run is None or (self.resumable is not None and not self.resumable(run)):
            raise SpecError("--resume", f"no interrupted {self.kind} launch of spec {self.spec.name!r} "
                            f"(hash {self.spec.hash()}) found in {self.uri}; run without --resume")
        return run

    @property
    def spool_dir(self) -> str:
        return self.parent.spool_dir

    def context(self, swept: list[str], log_axes: list[str], **extra) -> TrialContext:
        """The one context every trial of this launch gets."""
        opts = self.options
        parent = self.parent
        target = RunTarget(self.uri, parent.experiment_id, parent.run_id, self.spec.hash(), parent.code_version,
                           tuple(swept), tuple(sorted(log_axes)), self.spool_dir, opts.delivery_wait_s,
                           opts.buffer_points, parent_key=parent.launch_key, experiment_name=parent.experiment_name)
        res = self.spec.resources
        return TrialContext(target, extra.pop("checkpoint_every", opts.checkpoint_every), self.min_report_s,
                            res.cpu, res.gpu, self.spec.artifacts.final_state,
                            fit_reports=opts.min_report_s is None and self.min_report_s > 0,
                            code_paths=code_paths(), **extra)

    # -- rounds of Tune runs -------------------------------------------------------------------------------------
    def path_of(self, name: str) -> str:
        """Where the Tune experiment `name` of this launch keeps its state (what a resume restores)."""
        return f"{self.storage.rstrip('/')}/{name}"

    def tuner(self, name: str, ctx: TrialContext | None = None, *, packs: list[dict] | None = None,
              total_configs: int = 0, total_work: float = 0.0, restore: str | None = None, search_alg=None,
              scheduler=None, num_samples: int = 1,
              checkpoints_kept: int = 2, label: str = "") -> tune.Tuner:
        """A Tuner over `train_pack`: a grid over `packs`, or `num_samples` trials proposed by `search_alg`; or
        the Tune experiment at `restore`, continued (finished trials are not run again)."""
        trainable = tune.with_resources(train_pack, {"cpu": self.spec.resources.cpu, "gpu": self.spec.resources.gpu})
        opts = self.options
        progress = ProgressLine(total_configs, total_work, opts.progress, label=label)
        callbacks = [progress, *([DiskWatch(self.storage)] if "://" not in self.storage else [])]
        if restore is not None:
            self.experiment_path = restore
            tuner = tune.Tuner.restore(restore, trainable, resume_errored=True)
            replace_restored_callbacks(tuner, callbacks)
            return tuner
        self.experiment_path = self.path_of(name)
        space = {"grokray": ctx.to_dict()}
        if packs is not None:
            space["pack"] = {"grid_search": store_packs(self.experiment_path, packs)}  # a file each: see spec/wire.py
        return tune.Tuner(
            trainable,
            param_space=space,
            tune_config=tune.TuneConfig(
                search_alg=search_alg, scheduler=scheduler, num_samples=num_samples,
                # a searcher is limited by its ConcurrencyLimiter (Tune ignores this beside one, and says so)
                max_concurrent_trials=None if search_alg is not None else opts.max_concurrent,
                # a finished trial's process trains the next pack: Ray starts a new process per actor, which
                # imports torch, Tune and MLflow's store again (about 7 s a trial on 2 cores; 6 trials of 2 at
                # a time took 21-24 s without reuse and 8 s with it)
                reuse_actors=True,
                trial_name_creator=trial_name, trial_dirname_creator=trial_dirname),
            run_config=tune.RunConfig(
                name=name, storage_path=self.storage, verbose=0,
                failure_config=tune.FailureConfig(max_failures=opts.max_failures),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=checkpoints_kept),
                callbacks=callbacks),
        )

    def fit(self, tuner: tune.Tuner) -> Round:
        for note in self.notes:  # what slows this launch, said once, as it starts to train
            print(note, file=sys.stderr)
        self.notes = []
        if self.delivery is None:
            self.delivery = BackgroundDelivery(self.parent).start()
        t0 = time.time()
        self.timings.setdefault("setup", t0 - self.t_start - self.timings.get("ray_start", 0.0))
        stop = quiet_tune_resume_hint()
        stop.clear()
        results = list(tuner.fit())
        self.timings["tune"] = self.timings.get("tune", 0.0) + time.time() - t0
        rnd = Round(results, stopped=stop.is_set())
        for r in results:
            name = trial_name_of(r)
            if r.error is not None:
                rnd.errors[name] = error_reason(r.error)
            elif not (r.metrics or {}).get("pack_done"):
                rnd.unfinished += 1
            rnd.member_phases.update((r.metrics or {}).get("member_phases") or {})
        self.rounds.append(rnd)
        return rnd

    def deliver_held(self) -> None:
        """After the last fit: what an outage held back goes out once now, if the server answers (see
        BackgroundDelivery.finish); what still cannot is the close's to wait for."""
        if self.delivery is not None:
            with StoreAway():
                self.delivery.finish()

    # -- the close -----------------------------------------------------------------------------------------------
    def close(self, configurations: int, packs: int = 0, interrupted: bool | None = None,
              metrics: dict[str, float] | None = None, note: list[str] | tuple = ()) -> LaunchSummary:
        """Replay the spool, close the parent (phase counts, `configurations`, `metrics`, status), describe it in
        MLflow (run.report: the note, with the driver's `note` lines, and the phase diagram) and summarise.
        A launch is FAILED when a trial failed, KILLED when `interrupted` (None: when a trial did not finish its
        pack; a search whose scheduler stops trials says False)."""
        t0 = time.time()
        results = [r for rnd in self.rounds for r in rnd.results]
        errors = {k: v for rnd in self.rounds for k, v in rnd.errors.items()}
        if interrupted is None:
            interrupted = any(rnd.unfinished for rnd in self.rounds)
        status = launch_status(len(errors), interrupted)
        fallback: dict[str, int] = {}  # what the packs reported, should the server be away now
        for r in results:
            for phase, n in ((r.metrics or {}).get("phases") or {}).items():
                fallback[phase] = fallback.get(phase, 0) + int(n)
        if self.delivery is not None:
            self.delivery.stop()
        stop_beat()
        waiting = stops_end(threading.Event())  # Ctrl-C or SIGTERM now ends the delivery wait, not the close
        if self.options.delivery_wait_s > 0 and pending_points(self.spool_dir)[0] and not self.parent.answers():
            print(f"grokray: MLflow at {self.uri} is not answering; retrying the held-back metrics for up to "
                  f"{self.options.delivery_wait_s:g} s (Ctrl-C stops waiting: `grokray replay` delivers them later)",
                  file=sys.stderr, flush=True)
        runs = None if DRIVERS[self.kind].study else closing_runs()  # a study's figures are its own
        closed = self.parent.close(status, self.options.delivery_wait_s, fallback, configurations, metrics,
                                   on_page=stop_beat, on_record=None if runs is None else runs.add,
                                   packs=self.every_pack(results), stop=waiting)
        stop_beat()
        self.closed = True
        ignore_stops()  # closed: a stop signal now would only cut the report and Ray's shutdown (exit 143)
        self.timings["finish"] = time.time() - t0
        if not closed.undelivered and self.parent.run_id:  # the server holds every run: the figure can be drawn
            self.timings["report"] = report_on_parent(self.parent, self.spec, self.kind, status, closed.phase_counts,
                                                      configurations, closed.duration_s, note,
                                                      runs=runs if closed.counted else None)
        last = [dict(r.metrics or {}) for r in results]
        return LaunchSummary(
            kind=self.kind, name=self.spec.name, tracking_uri=self.uri, experiment_id=self.parent.experiment_id,
            parent_run_id=self.parent.run_id, experiment_path=self.experiment_path, configurations=configurations,
            packs=packs, phase_counts=closed.phase_counts, errored_trials=len(errors), interrupted=interrupted,
            wall_s=time.time() - self.t_start, trial_metrics=last,
            trial_errors=errors, spooled_points=sum(int(m.get("spooled_points", 0)) for m in last),
            undelivered_dir=closed.spool_dir if closed.undelivered else "",
            undelivered_points=closed.undelivered_points, undelivered_batches=closed.undelivered_batches,
            timings=self.timings,
        )

    def every_pack(self, results: list) -> list[str] | None:
        """The pack id of every trial, when they are every pack with children under the parent (the close reads
        them pack by pack): a grid's one Tune run, resumed or not, holds them all. An adaptive launch resumed
        mid-way holds only its later rounds, and a search's trials are not packs: None (every child)."""
        packs = [trial_name_of(r) for r in results]
        one_run = DRIVERS[self.kind].one_run_of_packs
        return packs if one_run and packs and "?" not in packs and len(self.rounds) == 1 else None


def trial_name_of(result) -> str:
    """The name of the trial a Tune result came from (its pack id for a grid)."""
    return name_of(result.config or {})
