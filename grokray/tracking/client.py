"""The few things every MLflow call of grokray's needs: where the store is, retry of transient failures, paging,
batching within MLflow's limits, and a probe of a tracking server that costs seconds, not MLflow's minutes.

Everything goes through `MlflowClient` (no global active run, so the workers of many packs never share state).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from ..errors import SpecError
from ..phases import counted_phase
from .schema import PHASE_TAG, TRIAL_KEY_TAG, parent_filter
from .uri import database_problem, local_store_path, resolve_tracking_uri, scheme_problem

MAX_METRICS = 1000  # mlflow.utils.validation.MAX_METRICS_PER_BATCH
MAX_PARAMS_TAGS = 100  # mlflow.utils.validation.MAX_PARAMS_TAGS_PER_BATCH
MAX_VALUE_LEN = 6000
SECRET = re.compile(r"token|password|passwd|secret|credential|key", re.IGNORECASE)
NOT_SECRET = frozenset({TRIAL_KEY_TAG})
TRANSIENT_MARKERS = ("connection", "max retries", "timed out", "timeout", "temporarily", "locked", "refused",
                     "unavailable", "bad gateway", "reset by peer", "remote end closed")
# Against an `mlflow server`, each run MLflow ends prints two "View run ... at" lines and first GETs the run to
# name it: one request and two lines per configuration, 2*10^5 lines for a lab's sweep. The runs page links the
# launch instead (`grokray ui`). A user who wants the lines sets the variable to false.
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")




def tracking_client(uri: str) -> MlflowClient:
    """A client of one store, for the layers above that do not name MLflow."""
    return MlflowClient(tracking_uri=uri)




def existing_store(uri: str | None) -> str:
    """The resolved URI of a store that already exists. Reading commands (analyze, atlas --pages-only, ui) call
    it first: opening a missing SQLite file or directory through MLflow would create an empty store there."""
    resolved = resolve_tracking_uri(uri)
    if problem := scheme_problem(resolved) or database_problem(resolved):
        raise SpecError("--tracking-uri", problem)
    path = local_store_path(resolved)
    if path is not None and not path.exists():
        raise SpecError("--tracking-uri", f"no MLflow store at {path} ({resolved}); run a sweep here first, or "
                        "name the store with --tracking-uri or MLFLOW_TRACKING_URI")
    return resolved


def is_secret(name: str) -> bool:
    return name not in NOT_SECRET and bool(SECRET.search(name))


def clean(items: dict) -> dict[str, str]:
    """String values for params/tags, without anything whose name looks like a credential."""
    out = {}
    for k, v in items.items():
        if is_secret(k):
            continue
        text = v if isinstance(v, str) else json.dumps(v) if isinstance(v, list | dict) else str(v)
        out[k] = text[:MAX_VALUE_LEN]
    return out


def code_version() -> str:
    """`git describe` of the checkout grokray runs from, else the installed package version."""
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=root, capture_output=True,
                             text=True, timeout=5, check=True)
        if out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        from importlib.metadata import version

        return version("grokray")
    except Exception:  # noqa: BLE001 - any metadata problem means "unknown"
        return "unknown"


def now_ms() -> int:
    return int(time.time() * 1000)


# -- transient failures ----------------------------------------------------------------------------------------
def is_transient(exc: BaseException) -> bool:
    """Worth retrying later: the server is unreachable, overloaded or locked. A 4xx answer (a bad request) is not."""
    if isinstance(exc, ConnectionError | TimeoutError | OSError):
        return True
    code = getattr(exc, "get_http_status_code", None)
    status = code() if callable(code) else None
    if status is not None and 400 <= status < 500:
        return False
    text = str(exc).lower()
    return any(m in text for m in TRANSIENT_MARKERS) or (status is not None and status >= 500)


class StoreAway:
    """`with StoreAway() as away:` runs the block; an error that says the tracking store is away (is_transient)
    ends the block and sets `away.happened`, so the caller goes on without the store (spooling, deferring, leaving
    the rest to the close or `grokray replay`); any other error is raised. The one place this rule is written."""

    def __init__(self):
        self.happened = False

    def __enter__(self) -> StoreAway:
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or not isinstance(exc, Exception) or not is_transient(exc):
            return False
        self.happened = True
        return True


def retry(fn, *args, attempts: int = 6, **kwargs):
    """SQLite allows one writer at a time; packs logging at once may see 'database is locked' briefly, and a
    tracking server may be restarting. Transient failures are retried with backoff (0.2 s doubling, at most
    15 s a wait); anything else is raised at once."""
    for i in range(attempts):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            if i == attempts - 1 or not is_transient(exc):
                raise
            time.sleep(min(15.0, 0.2 * 2**i))
    return None


def quick_failing_http() -> None:
    """MLflow's HTTP client retries a refused connection for minutes by default. Workers spool instead, so they
    ask for one quick retry (the user's own MLFLOW_HTTP_REQUEST_* settings win)."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")




# -- reading and writing ---------------------------------------------------------------------------------------
def log_metrics(client: MlflowClient, run_id: str, metrics: list[Metric], tags: dict | None = None,
                params: dict | None = None, attempts: int = 6) -> int:
    """Send metrics, params and tags in as few `log_batch` calls as MLflow's limits allow (1000 metrics,
    100 params + tags, 1000 entities per call). Params go first, tags ride in the last call. Returns calls made."""
    param_list = [Param(k, v) for k, v in clean(params or {}).items()]
    tag_list = [RunTag(k, v) for k, v in clean(tags or {}).items()]
    calls, mi = 0, 0
    while True:
        batch_params, param_list = param_list[:MAX_PARAMS_TAGS], param_list[MAX_PARAMS_TAGS:]
        room_tags = MAX_PARAMS_TAGS - len(batch_params)
        n_metrics = min(MAX_METRICS - len(batch_params), len(metrics) - mi)
        batch_metrics = metrics[mi : mi + n_metrics]
        mi += n_metrics
        last = not param_list and mi >= len(metrics)
        batch_tags = []
        if last:
            batch_tags, tag_list = tag_list[:room_tags], tag_list[room_tags:]
            last = not tag_list
        if batch_params or batch_metrics or batch_tags:
            retry(client.log_batch, run_id, metrics=batch_metrics, params=batch_params, tags=batch_tags,
                  attempts=attempts)
            calls += 1
        if last:
            return calls


def latest_steps(client: MlflowClient, run_id: str, attempts: int = 3) -> dict[str, int]:
    """Metric key -> the step of its latest stored point, in one request (the run's metrics as MLflow sends them)."""
    proto = retry(client.get_run, run_id, attempts=attempts).data.to_proto()
    return {m.key: int(m.step) for m in proto.metrics}


def get_or_create_experiment(client: MlflowClient, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # noqa: BLE001 - created concurrently by another driver
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


STREAM_PAGE = 200  # runs per page where a reader streams: a page of 1,000 runs is ~30 MB in passing, and a
# driver paging through 10^4 of them grew 2 MB per 1,000 runs; pages of 200 held it flat (benchmarks/README.md)


def search_pages(client: MlflowClient, experiment_id: str | list[str], filter_string: str = "", attempts: int = 6,
                 size: int = 1000):
    """The runs matching the filter, one page (up to `size`) at a time: a reader of 10^5 runs holds one page."""
    ids = [experiment_id] if isinstance(experiment_id, str) else list(experiment_id)
    token = None
    while True:
        page = retry(client.search_runs, ids, filter_string=filter_string, max_results=size, page_token=token,
                     attempts=attempts)
        yield list(page)
        token = page.token
        if not token:
            return


def search_all(client: MlflowClient, experiment_id: str | list[str], filter_string: str = "", attempts: int = 6
               ) -> list:
    """Every run matching the filter in one experiment (or a list of them), page by page."""
    return [run for page in search_pages(client, experiment_id, filter_string, attempts) for run in page]


def find_parent(client: MlflowClient, experiment_name: str, spec_hash: str, kind: str | None = None):
    """The latest parent run of this exact configuration set (of one driver's kind, if given), or None."""
    exp = client.get_experiment_by_name(experiment_name)
    if exp is None:
        return None
    runs = retry(client.search_runs, [exp.experiment_id], filter_string=parent_filter(spec_hash, kind),
                 order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0] if runs else None


def run_is_active(client: MlflowClient, run_id: str) -> bool:
    try:
        return client.get_run(run_id).info.lifecycle_stage == "active"
    except Exception:  # noqa: BLE001 - deleted, or in another store
        return False


def counted_phase_of(run) -> str:
    """A classified run's phase as counted: an undecodable split apart (grokray.phases.counted_phase); "" if none."""
    phase = run.data.tags.get(PHASE_TAG, "")
    threshold = float(run.data.params.get("phases.threshold", 0.9))
    return phase and counted_phase(phase, run.data.metrics.get("ideal_val_acc"), threshold)


def phase_counts(runs) -> dict[str, int]:
    """Classified runs per phase, as counted (counted_phase_of)."""
    counts: dict[str, int] = {}
    for r in runs:
        phase = counted_phase_of(r)
        if phase:
            counts[phase] = counts.get(phase, 0) + 1
    return dict(sorted(counts.items()))


def prepare_store(uri: str) -> None:
    """A local SQLite store, made ready once per launch, under an exclusive lock on the file's folder (flock: nothing
    is written beside the store): its tables made by MLflow's migrations, so two launches starting on the same new
    file no longer both run them (the second failed: "duplicate column name"; now it waits for the first's
    schema); and write-ahead-log mode, a property of the file, so every worker gets it: packs then commit their
    log_batch calls without taking the whole database's lock, and each commit costs less (measured: the workers'
    MLflow time fell by 17% on the bench_sweep grid)."""
    if not uri.startswith("sqlite:///") or uri.endswith(":memory:"):
        return
    import fcntl
    import sqlite3

    path = Path(uri[len("sqlite:///"):])
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        try:
            fcntl.flock(folder, fcntl.LOCK_EX)  # released when the descriptor closes
        except OSError:  # a file system without locks (some network mounts): open as before, unguarded
            pass
        _set_wal(sqlite3, path)
        _open_schema(uri)
    finally:
        os.close(folder)


def _set_wal(sqlite3, path: Path, wait_s: float = 30.0) -> None:
    """WAL mode, retried: another process that opens the file without our lock (an `mlflow ui`, a reader polling it)
    makes SQLite refuse the switch at once, without its busy wait. WAL is a speed-up, so after wait_s the launch goes
    on in the file's present mode rather than failing."""
    deadline = time.monotonic() + wait_s
    while True:
        con = sqlite3.connect(path, timeout=wait_s)
        try:
            con.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError:
            if time.monotonic() > deadline:
                return
        finally:
            con.close()
        time.sleep(0.2)


def _open_schema(uri: str, tries: int = 5) -> None:
    """MLflow's tables, made or checked. An opener outside our lock may be running the same migrations on a new file;
    the loser's error ("duplicate column name", "database is locked") is that race, and the next try finds the
    schema made."""
    for attempt in range(tries):
        try:
            MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
            return
        except Exception:
            if attempt == tries - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
