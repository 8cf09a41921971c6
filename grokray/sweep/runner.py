"""`grokray run`: start or join Ray, open the MLflow parent run, let Ray Tune schedule the packs, summarise.

Without an address a private local Ray starts (`ray.init(address="local")`; a bare `ray.init()` would try to
join whatever cluster an earlier `ray start` recorded). With `--address` or `RAY_ADDRESS` it joins that cluster.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import yaml
from ray import tune

from ..spec import Spec
from .expand import Plan, expand, local_slots
from .trainable import train_pack

DEFAULT_STORAGE = "grokray-results"


@dataclass
class SweepOptions:
    resume: bool = False
    max_concurrent: int | None = None
    address: str | None = None
    tracking_uri: str | None = None
    storage: str | None = None
    checkpoint_every: int = 1000  # steps per chunk: each chunk logs to MLflow and may checkpoint + report
    # At most one Tune result (with its checkpoint and MLflow batch) per pack per this many seconds, plus the
    # last one: Tune asks for a few results per second across a cluster, and a lost node costs <= this much.
    min_report_s: float = 30.0
    progress: bool | None = None  # the live line; None: only when stdout is a terminal
    num_cpus: int | None = None  # local Ray only
    max_failures: int = 3
    delivery_wait_s: float = 60.0  # after a tracking outage: how long a pack, then the driver, retries the backlog
    buffer_points: int = 200_000  # metric points a worker holds in memory while the tracking server is away
    max_configs: int | None = None  # refuse larger expansions (the CLI asks for --yes instead)
    parent_tags: dict[str, str] = field(default_factory=dict)  # extra tags on the parent run (e.g. the atlas's)


@dataclass
class SweepSummary:
    name: str
    experiment_path: str
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    configurations: int
    packs: int
    phase_counts: dict[str, int]
    errored_trials: int
    wall_s: float
    trial_nodes: dict[str, str] = field(default_factory=dict)  # pack id -> node id of its last result
    trial_metrics: list[dict] = field(default_factory=list)  # last result of every trial
    spooled_points: int = 0  # metric points that waited out a tracking outage in a spool
    undelivered_dir: str = ""  # where metrics that could not be delivered wait for `grokray replay`
    undelivered_points: int = 0
    undelivered_batches: int = 0
    # seconds of wall time: ray_start, setup (Ray up -> Tune starts), tune, finish (parent run), ray_stop
    timings: dict[str, float] = field(default_factory=dict)
    trial_errors: dict[str, str] = field(default_factory=dict)  # pack id -> why its trial failed (last line)


# -- progress line -------------------------------------------------------------------------------------------
def _fmt_s(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class ProgressLine(tune.Callback):
    """One live line: configurations done/total, phase counts so far, ETA. Silent unless stdout is a TTY."""

    def __init__(self, total_configs: int, total_work: float, enabled: bool | None = None):
        self.total_configs = total_configs
        self.total_work = max(total_work, 1.0)
        self.enabled = enabled
        self._reset()

    def _reset(self):
        self.latest: dict[str, dict] = {}
        self.start = time.time()
        self.last_draw = 0.0
        self.width = 0

    def setup(self, **info):
        self._reset()
        if self.enabled is None:
            self.enabled = sys.stdout.isatty()

    def line(self) -> str:
        done = sum(r.get("members_done", 0) for r in self.latest.values())
        phases: dict[str, int] = {}
        work = 0.0
        for r in self.latest.values():
            for p, n in (r.get("phases") or {}).items():
                phases[p] = phases.get(p, 0) + n
            work += r.get("step", 0) * r.get("members", 0)
        frac = min(1.0, work / self.total_work)
        elapsed = time.time() - self.start
        eta = f"ETA {_fmt_s(elapsed * (1 - frac) / frac)}" if frac > 0.02 else "ETA ?"
        counts = " ".join(f"{p} {n}" for p, n in sorted(phases.items())) or "-"
        return f"[grokray] {done}/{self.total_configs} configurations | {counts} | {_fmt_s(elapsed)} {eta}"

    def _draw(self, force=False):
        if not self.enabled or (not force and time.time() - self.last_draw < 0.5):
            return
        self.last_draw = time.time()
        text = self.line()
        sys.stdout.write("\r" + text.ljust(self.width))
        sys.stdout.flush()
        self.width = len(text)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.latest[trial.trial_id] = result
        self._draw()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._draw(force=True)

    def on_experiment_end(self, trials, **info):
        if self.enabled and self.width:
            self._draw(force=True)
            sys.stdout.write("\n")
            sys.stdout.flush()

    def __getstate__(self):  # Tuner pickles its run config; the live state is rebuilt in setup()
        state = dict(self.__dict__)
        state["latest"] = {}
        return state


# -- the run -------------------------------------------------------------------------------------------------
def trial_name(trial) -> str:
    return trial.config["pack"]["pack_id"]


def trial_dirname(trial) -> str:
    return f"{trial.config['pack']['pack_id']}_{trial.trial_id}"


def resolve_storage(storage: str | None) -> str:
    storage = storage or DEFAULT_STORAGE
    return storage if "://" in storage else str(Path(storage).resolve())


def start_ray(options, spec: Spec | None = None, warm_up: bool = True) -> bool:
    """Join `options.address` / RAY_ADDRESS or start a private local Ray. True if we started (and must stop) it.

    Shared by `grokray run`, adaptive rounds and `grokray search` (any options with address and num_cpus).
    warm_up: import the driver's heavy modules meanwhile (False: the caller has started that thread itself)."""
    import ray

    if ray.is_initialized():
        return False
    address = options.address or os.environ.get("RAY_ADDRESS")
    quiet = {"log_to_driver": False, "logging_level": "WARNING", "configure_logging": True}
    if warm_up:
        from .warm import driver_imports_in_background

        driver_imports_in_background()
    if address:
        ray.init(address=address, **quiet)
    else:
        ray.init(address="local", num_cpus=options.num_cpus, include_dashboard=False, **quiet)
    return True


def check_gpu_request(spec: Spec, options) -> None:
    """A GPU request on a private local Ray needs CUDA on this machine: said before Ray starts or MLflow is
    written. Joining a cluster (--address, RAY_ADDRESS, or a Ray already up), the GPUs are the workers' and are
    checked once joined (check_cluster_gpus); the driver of a CPU head has none of its own."""
    import ray

    gpu = spec.resources.gpu
    if gpu <= 0 or ray.is_initialized() or options.address or os.environ.get("RAY_ADDRESS"):
        return
    import torch

    if not torch.cuda.is_available():
        from ..errors import SpecError

        raise SpecError("resources.gpu", f"got {gpu:g}, but this machine's torch ({torch.__version__}) cannot use "
                        "CUDA and no cluster is given; set resources.gpu: 0, or join a GPU cluster with --address "
                        "(or RAY_ADDRESS)")


def check_cluster_gpus(spec: Spec) -> None:
    """Once joined: a GPU request on a cluster that declares no GPU would wait forever; say so instead."""
    import ray

    if spec.resources.gpu > 0 and not ray.cluster_resources().get("GPU", 0):
        from ..errors import SpecError

        raise SpecError("resources.gpu", f"got {spec.resources.gpu:g}, but the Ray cluster declares no GPU "
                        f"(its resources: {', '.join(sorted(k for k in ray.cluster_resources() if ':' not in k))}); "
                        "set resources.gpu: 0 or add GPU nodes")


def gpu_free_bytes(spec: Spec, timeout_s: float = 60.0) -> int | None:
    """Free memory of a GPU the packs will run on, for `pack_size: auto`: asked of a GPU worker by a task that
    takes the trial's GPU share (the driver may be a CPU head). None when its torch cannot open CUDA, or no GPU
    frees up in time: then packs are sized by the CPU rule."""
    import ray

    if spec.resources.gpu <= 0 or spec.resources.pack_size != "auto":
        return None

    @ray.remote(num_gpus=min(1.0, spec.resources.gpu), num_cpus=0)
    def free_memory():
        import torch

        return torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else None

    try:
        return ray.get(free_memory.remote(), timeout=timeout_s)
    except Exception:  # noqa: BLE001 - a slow or broken GPU node must not stop the sweep from being planned
        return None


def spool_dir_for(experiment_path: str, parent_run_id: str) -> str:
    """Undelivered metrics live beside the Tune results (shared storage on a cluster), else in ~/.grokray."""
    from ..tracking.delivery import SPOOL_DIRNAME

    if "://" in experiment_path:
        return str(Path.home() / ".grokray" / SPOOL_DIRNAME / parent_run_id)
    return str(Path(experiment_path) / SPOOL_DIRNAME)


def _finish_tracking(tracker, status: str, results, spool: str, wait_s: float) -> dict[str, int]:
    """Deliver what packs left in the spool, then close the parent run. If the tracking server is still away,
    the parent's closing batch joins the spool too and the phase counts come from Tune's results."""
    from ..tracking.delivery import Batch, Spool, is_transient, replay_dir

    if tracker.uri.startswith("http"):
        from ..tracking.delivery import quick_failing_http

        quick_failing_http()  # a server that is still away answers in seconds, not after minutes of retries
    replay_dir(spool, tracker.client, deadline_s=wait_s)
    try:
        return tracker.finish(status)  # the phase counts it wrote to the parent, from one search of the children
    except Exception as exc:  # noqa: BLE001
        if not is_transient(exc):
            raise
    counts: dict[str, int] = {}
    for r in results:
        for phase, n in ((r.metrics or {}).get("phases") or {}).items():
            counts[phase] = counts.get(phase, 0) + n
    now = int(time.time() * 1000)
    batch = Batch(tracker.parent_run_id, [[f"phase_count/{p}", float(n), now, 0] for p, n in counts.items()], {},
                  {f"grokray.phase_count.{p}": str(n) for p, n in counts.items()}, status)
    Spool(Path(spool) / f"parent-{tracker.parent_run_id}.jsonl").append(batch)
    return dict(sorted(counts.items()))


def _slots(spec: Spec) -> int:
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 0)) or None
    return local_slots(spec, cpus)


def _open_tracker(uri: str | None, experiment_name: str):
    from ..tracking import SweepTracker, resolve_tracking_uri

    return SweepTracker(resolve_tracking_uri(uri), experiment_name)


def run_sweep(spec: Spec, options: SweepOptions | None = None) -> SweepSummary:
    """Run (or resume) the sweep of `spec`; the spec is validated in full before Ray or MLflow is touched."""
    import ray

    options = options or SweepOptions()
    from .expand import check_size

    check_size(spec, options.max_configs)
    spec.trials()  # every configuration parses, or a SpecError leaves nothing behind
    check_gpu_request(spec, options)
    t_start = time.time()
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0 the legacy engine prints nothing
    # MLflow is imported and its store opened (a new SQLite file runs the schema migrations) while Ray starts,
    # whose seconds go mostly to waiting for its processes: ~3 s of a laptop sweep's start hidden. Runs are created
    # only once Ray is up.
    from .warm import driver_imports_in_background

    tracker_ready = driver_imports_in_background(then=partial(_open_tracker, options.tracking_uri, spec.name))
    timings: dict[str, float] = {}
    started_ray = start_ray(options, spec, warm_up=False)
    timings["ray_start"] = time.time() - t_start
    try:
        check_cluster_gpus(spec)
        plan = expand(spec, slots=_slots(spec), gpu_free_bytes=gpu_free_bytes(spec))
        tracker = tracker_ready.result()
        uri = tracker.uri
        storage = resolve_storage(options.storage)
        trainable = tune.with_resources(train_pack, {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu})
        total_work = sum(len(p.members) * max(m.config.train.steps for m in p.members) for p in plan.packs)

        restored = None
        if options.resume:
            parent = tracker.find_parent(spec.hash())
            path = parent.data.tags.get("grokray.experiment_path") if parent else None
            if not path or not tune.Tuner.can_restore(path):
                from ..errors import SpecError

                raise SpecError("--resume", f"no interrupted sweep of spec {spec.name!r} (hash {spec.hash()}) "
                                f"found in {uri}; run without --resume")
            tracker.reopen(parent.info.run_id)
            restored = tune.Tuner.restore(path, trainable, resume_errored=True)
            tuner, experiment_path = restored, path
        else:
            name = f"{spec.name}_{time.strftime('%Y%m%d-%H%M%S')}"
            experiment_path = f"{storage.rstrip('/')}/{name}"
            spec_text = yaml.safe_dump(spec.raw, sort_keys=False)
            tracker.start_parent(spec, plan, experiment_path, spec_text, extra_tags=options.parent_tags)
            ctx = {
                "tracking_uri": uri,
                "experiment_id": tracker.experiment_id,
                "parent_run_id": tracker.parent_run_id,
                "spec_hash": spec.hash(),
                "code_version": tracker.client.get_run(tracker.parent_run_id).data.tags["grokray.code_version"],
                "swept": plan.swept,
                "log_axes": sorted(spec.log_axes),
                "checkpoint_every": options.checkpoint_every,
                "min_report_s": options.min_report_s,
                "cpu": spec.resources.cpu,
                "gpu": spec.resources.gpu,
                "final_state": spec.artifacts.final_state,
                "spool_dir": spool_dir_for(experiment_path, tracker.parent_run_id),
                "delivery_wait_s": options.delivery_wait_s,
                "buffer_points": options.buffer_points,
            }
            tuner = tune.Tuner(
                trainable,
                param_space=plan.param_space(ctx),
                tune_config=tune.TuneConfig(
                    max_concurrent_trials=options.max_concurrent,
                    trial_name_creator=trial_name,
                    trial_dirname_creator=trial_dirname,
                ),
                run_config=tune.RunConfig(
                    name=name,
                    storage_path=storage,
                    failure_config=tune.FailureConfig(max_failures=options.max_failures),
                    checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
                    verbose=0,
                    callbacks=[ProgressLine(plan.n_configs, total_work, options.progress)],
                ),
            )
        t_tune = time.time()
        timings["setup"] = t_tune - t_start - timings["ray_start"]
        results = tuner.fit()
        timings["tune"] = time.time() - t_tune
        errored = sum(1 for r in results if r.error is not None)
        errors = {r.config["pack"]["pack_id"]: error_reason(r.error) for r in results
                  if r.error is not None and r.config}
        interrupted = any(not (r.metrics or {}).get("pack_done") for r in results if r.error is None)
        status = "FAILED" if errored else "KILLED" if interrupted else "FINISHED"
        spool = spool_dir_for(experiment_path, tracker.parent_run_id)
        counts = _finish_tracking(tracker, status, results, spool, options.delivery_wait_s)
        from ..tracking.delivery import pending_points

        left_batches, left_points = pending_points(spool)
        timings["finish"] = time.time() - t_tune - timings["tune"]
        last = [dict(r.metrics or {}) for r in results]
        nodes = {r.metrics["pack_id"] if "pack_id" in (r.metrics or {}) else r.config["pack"]["pack_id"]:
                 (r.metrics or {}).get("node_id", "") for r in results if r.config}
        return SweepSummary(
            name=spec.name,
            experiment_path=experiment_path,
            tracking_uri=uri,
            experiment_id=tracker.experiment_id,
            parent_run_id=tracker.parent_run_id,
            configurations=plan.n_configs,
            packs=len(plan.packs),
            phase_counts=counts,
            errored_trials=errored,
            wall_s=time.time() - t_start,
            trial_nodes=nodes,
            trial_metrics=last,
            spooled_points=sum(int(m.get("spooled_points", 0)) for m in last),
            undelivered_dir=spool if left_batches else "",
            undelivered_points=left_points,
            undelivered_batches=left_batches,
            timings=timings,
            trial_errors=errors,
        )
    finally:
        if started_ray:
            t_stop = time.time()
            ray.shutdown()
            timings["ray_stop"] = time.time() - t_stop  # after wall_s, in the summary the caller gets


def error_reason(error: BaseException) -> str:
    """The exception a trial raised, as one line (Tune wraps it in a traceback of the worker)."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    causes = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", ln)]
    return (causes[-1] if causes else lines[-1] if lines else type(error).__name__)[:500]


def dry_run(spec: Spec) -> Plan:
    """Expand without Ray (slots = this machine's CPUs / resources.cpu, as a local run would use)."""
    return expand(spec)
