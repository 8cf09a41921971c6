"""The options every driver takes (one type, so no driver can silently drop one) and what every launch returns."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import Mistakes, SpecError
from ..spec.blocks import MAX_CONCURRENT, MAX_STEPS, MAX_WAIT_S
from ..tracking.records import RunStatus
from ..tracking.uri import folder_problem, resolve_tracking_uri, tracking_uri_problem
from .disk import space_problem

DEFAULT_STORAGE = "grokray-results"  # --storage's default, under the working directory
PROGRESS_MODES = ("auto", "always", "never")  # --progress (run/progress.py draws them)
EXIT_OK, EXIT_INCOMPLETE, EXIT_UNDELIVERED = 0, 1, 3  # the CLI's exit codes after a launch (2: a SpecError)


@dataclass(frozen=True)
class LaunchOptions:
    resume: bool = False
    max_concurrent: int | None = None  # trials (packs) running at once; a search's default is search.max_concurrent
    address: str | None = None  # Ray cluster to join (default: RAY_ADDRESS, else a private local Ray)
    tracking_uri: str | None = None
    storage: str | None = None  # Ray Tune results and checkpoints (default ./grokray-results)
    checkpoint_every: int = 1000  # steps per chunk: each chunk may log to MLflow, checkpoint and report
    # At most one Tune result (with its checkpoint and MLflow batch) per pack per this many seconds, plus the last
    # one: Tune asks for a few results per second across a cluster, and a lost node costs <= this much.
    # None: the driver's default (30 s; a search reports every chunk, which ASHA and Optuna read).
    min_report_s: float | None = None
    progress: str = "auto"  # auto: a live line on a terminal, plain lines every 30 s in a log; always; never
    num_cpus: int | None = None  # local Ray only
    max_failures: int = 3  # Tune's retries of a trial whose worker died
    delivery_wait_s: float = 60.0  # after a tracking outage: how long the launch's close retries the backlog, once
    buffer_points: int = 200_000  # metric points a worker holds in memory while the tracking server is away
    parent_tags: dict[str, str] = field(default_factory=dict)  # extra tags on the parent run (e.g. the atlas's)
    resume_command: str = ""  # the shell command that continues this launch (the CLI's, with its -s flags)

    def check_local_gpu_share(self, gpu: float) -> None:
        """What the launch refuses of a GPU share, for a dry-run (which starts no Ray): without a cluster to join,
        this machine's torch must serve it (run.cluster.check_gpu_request is the launch's)."""
        if not (self.address or os.environ.get("RAY_ADDRESS")):
            check_local_gpu_request(gpu)

    def validate(self) -> None:
        """Every option checked before Ray starts or MLflow is written; all mistakes at once (SpecError names
        each CLI flag). A dry-run calls it too, so it refuses what the launch would refuse: where the launch would
        write must be writable, though nothing is written yet (a store need not exist, only its folder)."""
        checks = [
            (self.max_concurrent is not None and not 1 <= self.max_concurrent <= MAX_CONCURRENT, "--max-concurrent",
             f"got {self.max_concurrent}; must be 1..{MAX_CONCURRENT:,}"),
            (not 1 <= self.checkpoint_every <= MAX_STEPS, "--checkpoint-every",
             f"got {self.checkpoint_every}; must be 1..{MAX_STEPS:,} steps"),
            (self.min_report_s is not None and not 0 <= self.min_report_s <= MAX_WAIT_S, "--report-every",
             f"got {self.min_report_s}; must be 0..{MAX_WAIT_S:,} seconds (a week)"),
            (not 0 <= self.delivery_wait_s <= MAX_WAIT_S, "--delivery-wait",
             f"got {self.delivery_wait_s}; must be 0..{MAX_WAIT_S:,} seconds (a week)"),
            (self.tracking_uri == "", "--tracking-uri", "got an empty URI; name a store, or leave the flag out for "
             "MLFLOW_TRACKING_URI or sqlite:///mlflow.db"),
            (self.storage == "", "--storage", "got an empty path; name a folder, or leave the flag out for "
             "./grokray-results"),
            (self.progress not in PROGRESS_MODES, "--progress",
             f"got {self.progress!r}; allowed: {', '.join(PROGRESS_MODES)}"),
            (self.max_failures < 0, "max_failures", f"got {self.max_failures}; must be >= 0"),
        ]
        address, flag = (self.address, "--address") if self.address else (os.environ.get("RAY_ADDRESS"), "RAY_ADDRESS")
        if address and (problem := ray_address_problem(address)):
            checks.append((True, flag, problem))
        uri = resolve_tracking_uri(self.tracking_uri)
        checks.append((bool(problem := tracking_uri_problem(uri)), "--tracking-uri", problem))
        storage = self.storage or DEFAULT_STORAGE
        if "://" not in storage:  # a cloud URI (s3://...) is the cluster's to reach
            problem = folder_problem(storage) or space_problem(storage)
            checks.append((bool(problem), "--storage", problem))
        mistakes = Mistakes()
        for bad, flag, message in checks:
            if bad:
                with mistakes.check():
                    raise SpecError(flag, message)
        mistakes.raise_any()


def launch_status(errored_trials: int, interrupted: bool) -> str:
    """The one status rule: FAILED when a trial failed, else KILLED when interrupted, else FINISHED."""
    return RunStatus.FAILED if errored_trials else RunStatus.KILLED if interrupted else RunStatus.FINISHED


@dataclass
class LaunchSummary:
    """What one launch did, whichever driver ran it."""

    kind: str  # grid, adaptive or search
    name: str
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    experiment_path: str  # the (last) Ray Tune experiment directory
    configurations: int
    packs: int
    phase_counts: dict[str, int]
    errored_trials: int
    interrupted: bool  # stopped before the end (Ctrl-C, max_rounds): --resume continues
    wall_s: float
    trial_metrics: list[dict] = field(default_factory=list)  # last result of every trial
    trial_errors: dict[str, str] = field(default_factory=dict)  # pack id -> why its trial failed (last line)
    spooled_points: int = 0  # metric points that waited out a tracking outage in a spool
    undelivered_dir: str = ""  # where metrics that could not be delivered wait for `grokray replay`
    undelivered_points: int = 0
    undelivered_batches: int = 0
    # seconds of wall time: ray_start, setup (Ray up -> Tune starts), tune, finish (parent run), ray_stop
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return launch_status(self.errored_trials, self.interrupted)

    @property
    def exit_code(self) -> int:
        """3 when anything was not delivered to MLflow, else 1 when a trial failed or the launch stopped early."""
        if self.undelivered_points or self.undelivered_batches:
            return EXIT_UNDELIVERED
        return EXIT_INCOMPLETE if self.errored_trials or self.interrupted else EXIT_OK


def clock(seconds: float) -> str:
    """A wall time as the progress line and the launch's last lines write it: 2m42s, 1h05m, 9s."""
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def check_local_gpu_request(gpu: float) -> None:
    """A GPU share asked of a private local Ray needs CUDA on this machine (run.cluster.check_gpu_request, and a
    local dry-run, which starts no Ray and must refuse what the launch would)."""
    if gpu <= 0:
        return
    import torch

    if not torch.cuda.is_available():
        raise SpecError("resources.gpu", f"got {gpu:g}, but this machine's torch ({torch.__version__}) cannot use "
                        "CUDA and no cluster is given; set resources.gpu: 0, or join a GPU cluster with --address "
                        "(or RAY_ADDRESS)")


def ray_address_problem(address: str, timeout_s: float = 3.0) -> str | None:
    """Whether a Ray to join answers at `address` (host:port, or ray://host:port), asked with a short timeout
    before anything starts: `ray.init` at a dead address waited over 100 s, and the store was made meanwhile.
    "auto" and "local" are Ray's to resolve."""
    import socket
    from urllib.parse import urlsplit

    if address in ("auto", "local"):
        return None
    parts = urlsplit(address if "://" in address else f"ray://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if not host or not port:
        return f"got {address!r}; expected HOST:PORT of a Ray head (e.g. 10.0.0.5:6379), ray://HOST:PORT or auto"
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return (f"nothing answers at {host}:{port} ({exc.strerror or type(exc).__name__}); start Ray there (ray "
                "start --head) or leave the address out for a private local Ray")
