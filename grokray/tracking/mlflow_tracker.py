"""MLflow as a Tracker (tracking/records.py): the one module that turns grokray's records, queries and statuses
into MLflow's entities, filter strings and status words, and splits writes within MLflow's batch limits.

Everything goes through `MlflowClient` (no global active run, so the workers of many packs never share state).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from .records import Point, RunNotFound, RunQuery, RunRecord, RunStatus
from .trackers import is_remote

PARENT_TAG = "mlflow.parentRunId"  # MLflow's nesting tag: its UI draws a run under its parent by it
MAX_METRICS = 1000  # mlflow.utils.validation.MAX_METRICS_PER_BATCH
MAX_PARAMS_TAGS = 100  # mlflow.utils.validation.MAX_PARAMS_TAGS_PER_BATCH
NEWEST_FIRST = ["attributes.start_time DESC"]
# Against an `mlflow server`, each run MLflow ends prints two "View run ... at" lines and first GETs the run to
# name it: one request and two lines per configuration, 2*10^5 lines for a lab's sweep. The runs page links the
# launch instead (`grokray ui`). A user who wants the lines sets the variable to false.
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
# A download draws a progress bar on stderr: noise in a one-line error, in a log, in a notebook cell.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# How long any statement on a SQLite store waits for another process's lock before "database is locked". SQLite
# takes one writer at a time, and Python's default wait is 5 s: a loaded 2-core machine with a driver, its packs
# and a reader on one file passed that (CI's node-loss test failed so). Failures after this wait are retried as
# transient (client.retry).
SQLITE_LOCK_WAIT_S = 60.0


def filter_string(query: RunQuery) -> str:
    """A RunQuery in MLflow's search syntax."""
    tags = {**query.tags, **({PARENT_TAG: query.parent_id} if query.parent_id is not None else {})}
    parts = [f"tags.`{k}` = '{v}'" for k, v in tags.items()]
    parts += [f"tags.`{k}` LIKE '%'" for k in query.with_tags]
    if query.status is not None:
        parts.append(f"attributes.status = '{query.status.value}'")
    return " and ".join(parts)


def record(run) -> RunRecord:
    """An MLflow Run as a RunRecord."""
    info, data = run.info, run.data
    return RunRecord(info.run_id, info.run_name or "", info.experiment_id, info.status, info.start_time,
                     info.end_time, dict(data.params), dict(data.tags), dict(data.metrics), data.tags.get(PARENT_TAG))


def wait_for_sqlite_locks() -> None:
    """Every SQLite connection this process opens through SQLAlchemy (MLflow's store) waits SQLITE_LOCK_WAIT_S for
    a lock. A listener on all engines, since MLflow makes its engine inside its store; registered once."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not event.contains(Engine, "connect", _sqlite_busy_timeout):
        event.listen(Engine, "connect", _sqlite_busy_timeout)


def _sqlite_busy_timeout(dbapi_connection, _record) -> None:
    import sqlite3

    if isinstance(dbapi_connection, sqlite3.Connection):
        dbapi_connection.execute(f"PRAGMA busy_timeout = {int(SQLITE_LOCK_WAIT_S * 1000)}")


def quick_failing_http() -> None:
    """MLflow's HTTP client retries a refused connection for minutes by default. A launch's writers spool instead,
    so they ask for one quick retry (the user's own MLFLOW_HTTP_REQUEST_* settings win)."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")


def import_store_modules(uri: str) -> None:
    """The store module MLflow opens for `uri`: its SQL store (sqlalchemy, alembic) for a database, its REST store
    for a server, its file store for a folder."""
    if is_remote(uri):
        import mlflow.store.tracking.rest_store  # noqa: F401
    elif uri.startswith("file:") or "://" not in uri:
        import mlflow.store.tracking.file_store  # noqa: F401
    else:
        import mlflow.store.tracking.sqlalchemy_store  # noqa: F401


class MlflowTracker:
    """One MLflow tracking store (a tracking URI). `spooled`: a launch's writer, whose spool holds what the store
    does not take, so a server that is away answers in seconds. `prepare`: the launch's driver makes a local SQLite
    file ready first (prepare_store)."""

    def __init__(self, uri: str, spooled: bool = False, prepare: bool = False):
        self.uri = uri
        if uri.startswith("sqlite:"):
            wait_for_sqlite_locks()
        if spooled and is_remote(uri):
            quick_failing_http()
        if prepare:
            prepare_store(uri)  # before MLflow's first open of a new file, which makes its tables
        self.client = MlflowClient(tracking_uri=uri)

    # -- experiments ---------------------------------------------------------------------------------------------
    def experiment_id(self, name: str) -> str | None:
        exp = self.client.get_experiment_by_name(name)
        return None if exp is None else exp.experiment_id

    def ensure_experiment(self, name: str) -> str:
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if exp.lifecycle_stage == "deleted":
                self.client.restore_experiment(exp.experiment_id)
            return exp.experiment_id
        try:
            return self.client.create_experiment(name)
        except Exception:  # noqa: BLE001 - created concurrently by another driver
            exp = self.client.get_experiment_by_name(name)
            if exp is None:
                raise
            return exp.experiment_id

    def experiments(self) -> dict[str, str]:
        return {e.experiment_id: e.name for e in self.client.search_experiments()}

    # -- runs ----------------------------------------------------------------------------------------------------
    def create_run(self, experiment_id: str, name: str, tags: dict[str, str], start_ms: int | None,
                   parent_id: str | None = None) -> str:
        tags = {**tags, PARENT_TAG: parent_id} if parent_id else tags
        return self.client.create_run(experiment_id, run_name=name, tags=tags, start_time=start_ms).info.run_id

    def get_run(self, run_id: str) -> RunRecord:
        try:
            run = self.client.get_run(run_id)
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST" or "not found" in str(exc):
                raise RunNotFound(run_id) from exc
            raise
        if run.info.lifecycle_stage == "deleted":
            raise RunNotFound(run_id)
        return record(run)

    def search(self, experiment_ids: list[str], query: RunQuery, page_size: int = 1000,
               page_token: str | None = None) -> tuple[list[RunRecord], str | None]:
        page = self.client.search_runs(list(experiment_ids), filter_string=filter_string(query),
                                       max_results=page_size, order_by=NEWEST_FIRST, page_token=page_token)
        return [record(r) for r in page], page.token or None

    def log(self, run_id: str, points: list | None = None, params: dict[str, str] | None = None,
            tags: dict[str, str] | None = None) -> int:
        """In as few `log_batch` calls as MLflow's limits allow (1000 metrics, 100 params + tags, 1000 entities a
        call): params first, tags in the last call. Returns the calls made."""
        metrics = [Metric(k, float(v), int(ts), int(step)) for k, v, ts, step in points or []]
        param_list = [Param(k, v) for k, v in (params or {}).items()]
        tag_list = [RunTag(k, v) for k, v in (tags or {}).items()]
        mi = calls = 0
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
                self.client.log_batch(run_id, metrics=batch_metrics, params=batch_params, tags=batch_tags)
                calls += 1
            if last:
                return calls

    def delete_tag(self, run_id: str, key: str) -> None:
        self.client.delete_tag(run_id, key)

    def rename_run(self, run_id: str, name: str) -> None:
        self.client.update_run(run_id, name=name)

    def set_status(self, run_id: str, status: RunStatus, end_ms: int | None = None) -> None:
        if RunStatus(status) is RunStatus.RUNNING:
            self.client.update_run(run_id, status=RunStatus.RUNNING.value)
        else:
            self.client.set_terminated(run_id, RunStatus(status).value, end_time=end_ms)

    def delete_run(self, run_id: str) -> None:
        self.client.delete_run(run_id)

    # -- curves and artifacts ------------------------------------------------------------------------------------
    def curve(self, run_id: str, key: str) -> list[Point]:
        history = self.client.get_metric_history(run_id, key)
        return sorted((Point(m.step, m.value, m.timestamp) for m in history), key=lambda p: p.step)

    def latest_steps(self, run_id: str) -> dict[str, int]:
        """In one request: the run's metrics as MLflow sends them carry each key's latest step."""
        proto = self.client.get_run(run_id).data.to_proto()
        return {m.key: int(m.step) for m in proto.metrics}

    def artifact_paths(self, run_id: str, folder: str | None = None) -> list[str]:
        return [a.path for a in self.client.list_artifacts(run_id, folder)]

    def log_artifact(self, run_id: str, local: str | Path, folder: str | None = None) -> None:
        self.client.log_artifact(run_id, str(local), folder)

    def log_text(self, run_id: str, text: str, path: str) -> None:
        self.client.log_text(run_id, text, path)

    def download(self, run_id: str, path: str, dst: str | Path) -> Path:
        return Path(self.client.download_artifacts(run_id, path, str(dst)))


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


def _set_wal(sqlite3, path: Path, wait_s: float = SQLITE_LOCK_WAIT_S) -> None:
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
