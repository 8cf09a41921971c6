"""Ray itself: joining a cluster or starting a private local one, and the GPU checks made before any trial.

Without an address a private local Ray starts (`ray.init(address="local")`; a bare `ray.init()` would try to
join whatever cluster an earlier `ray start` recorded). With `--address` or `RAY_ADDRESS` it joins that cluster.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import ray

from ..errors import RayDidNotStart, SpecError
from ..plan.expand import local_slots
from ..spec.build import Spec
from .options import DEFAULT_STORAGE, check_local_gpu_request
from .signals import sigterm_as_ctrl_c

LIBRARY_LOG = "library-notices.log"
WORKER_NICENESS = "RAY_worker_niceness"  # Ray's own setting (ray_constants.RAY_WORKER_NICENESS); its default is 15


def resolve_storage(storage: str | None) -> str:
    storage = storage or DEFAULT_STORAGE
    return storage if "://" in storage else str(Path(storage).resolve())


def library_log(storage: str | None) -> Path:
    """Where library notices of a launch go: beside its results (a cloud URI: ~/.grokray)."""
    storage = resolve_storage(storage)
    return (Path.home() / ".grokray" if "://" in storage else Path(storage)) / LIBRARY_LOG


@contextmanager
def notices_to(path: Path):
    """Notices a library logs without a handler of its own (Ray's token-authentication notice at `ray.init`) go to
    `path`, not to the user's stderr: they ask nothing of the user."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    previous, logging.lastResort = logging.lastResort, handler
    try:
        yield
    finally:
        logging.lastResort = previous
        handler.close()


STOPPING_LINE = "grokray: stopping: the trials save their state, then the launch closes and says how to continue"


class TuneResumeHint(logging.Filter):
    """Ray Tune's own words on a stop ("Stop signal received ... Press CTRL+C", then "Resume experiment with:
    Tuner.restore(path=...)") give way to grokray's: one line as the stop begins, and at the close the command to
    paste (its -s flags and --resume). Two hints in two languages confuse."""

    def __init__(self):
        super().__init__()
        self.stopped = threading.Event()  # Tune took a stop signal: the launch's trials in flight did not finish

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Stop signal received"):
            self.stopped.set()
            print(STOPPING_LINE, file=sys.stderr, flush=True)
            return False
        if message.startswith("Failed to fetch metrics") and "were not found at" in message:
            return False  # a trial the stop caught before its first report: it has no metrics yet, nothing failed
        return "has been interrupted, but the most recent state was" not in message


def quiet_tune_resume_hint() -> threading.Event:
    """Install TuneResumeHint on Ray Tune's driver logger and its results reader, once. Returns its stop mark: the
    one sign Ray 2.60 gives of a stop signal (Tune's handler takes it, and marks what it ends TERMINATED as it
    marks ASHA's early stops), which a search needs to close KILLED rather than FINISHED."""
    hint = next((f for f in logging.getLogger("ray.tune.tune").filters if isinstance(f, TuneResumeHint)), None)
    hint = hint or TuneResumeHint()
    for name in ("ray.tune.tune", "ray.tune.analysis.experiment_analysis"):
        log = logging.getLogger(name)
        if hint not in log.filters:
            log.addFilter(hint)
    return hint.stopped


@contextmanager
def _env(name: str, value: str):
    """`name` set to `value` for the processes started inside (Ray's raylet reads its settings at start)."""
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def busy_machine_note(cores: int | None = None, load: float | None = None) -> str | None:
    """Said before a private local Ray starts when other jobs already load this machine: its trials will share
    the cores, so the sweep and its ETA run slower than the dry-run's estimate."""
    cores = cores or os.cpu_count() or 1
    load = os.getloadavg()[0] if load is None else load
    if load < max(1.0, 0.75 * cores):
        return None
    return (f"grokray: this machine is busy (load average {load:.1f} on {cores} cores) before the launch starts: its "
            "trials share the cores with those jobs, so expect it slower than the dry-run's estimate")


def starts_private_ray(options) -> bool:
    """True when this launch will start its own local Ray: no Ray up already, no --address, no RAY_ADDRESS."""
    return not (ray.is_initialized() or options.address or os.environ.get("RAY_ADDRESS"))


def start_ray(options) -> bool:
    """Join `options.address` / RAY_ADDRESS or start a private local Ray. True if we started (and must stop) it."""
    if ray.is_initialized():
        return False
    address = options.address or os.environ.get("RAY_ADDRESS")
    quiet = {"log_to_driver": False, "logging_level": "WARNING", "configure_logging": False}
    with notices_to(library_log(options.storage)):
        if address:
            ray.init(address=address, **quiet)
        else:
            # a private Ray's trials are the user's own job, as `grokray train` is: at Ray's default nice 15 any
            # other job on the machine starves them. A niceness the user set in the environment is kept.
            with _env(WORKER_NICENESS, os.environ.get(WORKER_NICENESS, "0")):
                start_local_ray(lambda: ray.init(address="local", num_cpus=options.num_cpus,
                                                 include_dashboard=False, **quiet))
    sigterm_as_ctrl_c()  # again: ray.init installs its own SIGTERM handler, which ends the driver at once
    return True


RAY_START_TRIES = 2
RAY_STARTUP_TIMEOUTS = ("timed out during startup", "Timed out waiting for file", "timed out waiting for")


def start_local_ray(init, tries: int = RAY_START_TRIES) -> None:
    """`init()` (a private local Ray's ray.init), tried again after a start-up timeout: Ray waits a fixed 30 s for
    its raylet to register (not a setting), which a machine at a load of 15+ on 2 cores misses about 7 times in 10.
    A start that fails every try is RayDidNotStart, one line with the load, instead of Ray's 30-line traceback
    (which the README's exit codes read as a failed trial). Ray's processes of a failed try are shut down."""
    for attempt in range(1, tries + 1):
        try:
            init()
            return
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for a start-up timeout
            if not any(words in str(exc) for words in RAY_STARTUP_TIMEOUTS):
                raise
            ray.shutdown()  # the half-started node's processes go before the next try
            if attempt == tries:
                cores = os.cpu_count() or 1
                load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
                raise RayDidNotStart(
                    f"grokray: Ray did not start ({tries} tries; it waits 30 s for its node): the machine is busy "
                    f"(load {load:.1f} on {cores} cores); nothing trained and no run was opened in the store. "
                    "Try again when it is quieter, or pass --address to join a Ray that is running") from None


def check_gpu_request(spec: Spec, options) -> None:
    """A GPU request on a private local Ray needs CUDA on this machine: said before Ray starts or MLflow is
    written. Joining a cluster (--address, RAY_ADDRESS, or a Ray already up), the GPUs are the workers' and are
    checked once joined (check_cluster_gpus); the driver of a CPU head has none of its own."""
    if starts_private_ray(options):
        check_local_gpu_request(spec.resources.gpu)


def check_cluster_gpus(spec: Spec) -> None:
    """Once joined: a GPU request on a cluster that declares no GPU would wait forever; say so instead."""
    if spec.resources.gpu > 0 and not ray.cluster_resources().get("GPU", 0):
        raise SpecError("resources.gpu", f"got {spec.resources.gpu:g}, but the Ray cluster declares no GPU "
                        f"(its resources: {', '.join(sorted(k for k in ray.cluster_resources() if ':' not in k))}); "
                        "set resources.gpu: 0 or add GPU nodes")


def idle_gpu_note(spec: Spec) -> str | None:
    """Once joined: a spec that asks for no GPU where Ray has some trains on the CPUs. Said, since on a GPU
    machine that is rarely what was meant, and the fix is one override."""
    gpus = ray.cluster_resources().get("GPU", 0)
    if spec.resources.gpu > 0 or not gpus:
        return None
    return (f"grokray: resources.gpu is 0, so the packs train on the CPUs, though Ray has {gpus:g} GPU"
            f"{'s' if gpus != 1 else ''}; -s resources.gpu=0.25 trains four packs on each card")


def gpu_free_bytes(spec: Spec, timeout_s: float = 60.0) -> int | None:
    """Free memory of a GPU the packs will run on, for `pack_size: auto`: asked of a GPU worker by a task that
    takes the trial's GPU share (the driver may be a CPU head). None when its torch cannot open CUDA, or no GPU
    frees up in time: then packs are sized by the CPU rule."""
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


def slots(spec: Spec) -> int:
    """Packs the joined cluster runs at once: its CPUs / resources.cpu, and its GPUs / resources.gpu."""
    have = ray.cluster_resources()
    return local_slots(spec, int(have.get("CPU", 0)) or None, have.get("GPU") or None)
