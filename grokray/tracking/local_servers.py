"""Throwaway tracking servers on 127.0.0.1: a PostgreSQL cluster and an `mlflow server` on top of it (or on a
SQLite file), for the tests, the tracking benchmark and a single-machine trial of the cluster's setup.

It uses the server binaries of Debian's `postgresql` package (`initdb`, `pg_ctl`); nothing is installed here.
PostgreSQL refuses to run as root, so under root the cluster belongs to the `postgres` user the package creates
and every command runs through `runuser`. The cluster lives in a temporary directory, listens on 127.0.0.1 only,
trusts local connections (nothing else can reach it) and is removed on stop.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DB = "mlflow"


def server_bin() -> Path | None:
    """The directory holding initdb and pg_ctl, or None when PostgreSQL's server is not installed."""
    for candidate in [os.environ.get("GROKRAY_PG_BIN", ""), *sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                                                                     reverse=True)]:
        if candidate and (Path(candidate) / "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def missing_reason() -> str | None:
    """Why a local PostgreSQL cannot start here (None: it can)."""
    if server_bin() is None:
        return "PostgreSQL's server is not installed (Debian: apt-get install postgresql)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser, and PostgreSQL refuses to run as root"
    try:
        import psycopg  # noqa: F401  # MLflow's SQLAlchemy store talks to PostgreSQL through it
    except ImportError:
        return "the psycopg driver is not installed (pip install 'psycopg[binary]')"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalPostgres:
    """`with LocalPostgres() as pg: pg.uri` -> postgresql+psycopg://postgres@127.0.0.1:PORT/mlflow."""

    def __init__(self, port: int | None = None, max_connections: int = 200, host_auth: str = "trust",
                 settings: dict[str, str] | None = None):
        reason = missing_reason()
        if reason:
            raise RuntimeError(reason)
        self.bin = server_bin()
        self.port = port or free_port()
        self.max_connections = max_connections
        self.host_auth = host_auth  # TCP connections; "scram-sha-256" makes roles need their password
        self.settings = dict(settings or {})  # more server settings (shared_buffers, max_wal_size, ...)
        self.dir = Path(tempfile.mkdtemp(prefix="grokray-pg-"))
        self.data = self.dir / "data"
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    @property
    def uri(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{DB}"

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, text=True, timeout=120)

    def start(self) -> LocalPostgres:
        if self.as_user:
            shutil.chown(self.dir, user="postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth-local=trust",
                  f"--auth-host={self.host_auth}", "--encoding=UTF8", "--no-sync")
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.dir} "
                   f"-c max_connections={self.max_connections} -c fsync=on -c synchronous_commit=on"
                   + "".join(f" -c {k}={v}" for k, v in self.settings.items()))
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.dir / "log"),
                  "-w", "-t", "60", "start")
        self._run(str(self.bin / "createdb"), "-h", str(self.dir), "-p", str(self.port), "-U", "postgres", DB)
        return self

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, FileNotFoundError):
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def sql(self, query: str, params: tuple = ()) -> list[tuple]:
        """Run one query against the mlflow database as its superuser, over the local socket (tests count rows)."""
        import psycopg

        with psycopg.connect(host=str(self.dir), port=self.port, user="postgres", dbname=DB) as con:
            with con.cursor() as cur:
                cur.execute(query, params)
                return cur.fetchall() if cur.description else []

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# MLflow 3's default server is uvicorn running the FastAPI app around the Flask one: measured here, a log-batch
# took 22 ms with one uvicorn worker and ~63 ms with two or more (every request, even /health, paid ~42 ms),
# against 3.7 ms under gunicorn serving the Flask app with threaded workers. grokray's servers use gunicorn.
GUNICORN_OPTS = "--threads 8 --timeout 120"
# MLflow 3's server also starts a GenAI job runner on a SQL store: 8 more processes (~250 MB each here) that poll
# its queue; grokray submits no such jobs.
QUIET_SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


@contextmanager
def stops_held() -> Iterator[None]:
    """SIGINT and SIGTERM that arrive inside wait for its end, then reach their handlers: a stop that raised while
    a server's process was being made (inside Popen, before its caller held the object) left that server running,
    since the caller's cleanup had nothing to stop. A no-op outside the main thread, where no handler runs, and for
    a signal whose handler Python cannot put back (one installed from C)."""
    main = threading.current_thread() is threading.main_thread()
    held = [signum for signum in (signal.SIGINT, signal.SIGTERM) if main and signal.getsignal(signum) is not None]
    caught: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, _frame: caught.append(signum)) for signum in held}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (zombies, which hold no socket, do not count)."""
    if not os.path.isdir("/proc"):
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            state, _ppid, pgrp = Path(stat).read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError, IndexError):
            continue  # it ended while read
        if int(pgrp) == pgid and state != "Z":
            return True
    return False


def _group_ended(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Whether `proc` and every process of its group ended within `timeout_s`. The `mlflow` CLI can exit before
    the gunicorn it started has closed its listening socket (found by CI: the port still answered after the CLI's
    exit), so a stop waits on the group, not on its leader alone."""
    end = time.monotonic() + timeout_s
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    while group_alive(proc.pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


class MlflowServer:
    """`mlflow server` on 127.0.0.1 over `backend` (a SQLAlchemy URI; default a SQLite file under `root`), which a
    test can stop and start again on the same port and store (a tracking outage). gunicorn=False: MLflow's
    default uvicorn server."""

    def __init__(self, root: str | Path, backend: str | None = None, workers: int = 1, gunicorn: bool = True,
                 host: str = "127.0.0.1", port: int | None = None):
        self.root = Path(root)
        self.backend = backend or f"sqlite:///{self.root}/server.db"
        self.host, self.port, self.workers, self.gunicorn = host, port or free_port(), workers, gunicorn
        self.url = f"http://{host}:{self.port}"
        self.proc = None

    def experiment_page(self, experiment_id: str = "") -> str:
        """The UI's page of one experiment's runs (the server's front page without one)."""
        return f"{self.url}/#/experiments/{experiment_id}/runs" if experiment_id else self.url

    def start(self, timeout_s: float = 90.0) -> MlflowServer:
        mlflow = Path(sys.executable).with_name("mlflow")
        with stops_held():  # a Ctrl-C as the process is made finds self.proc set, so stop() ends the server
            self.proc = subprocess.Popen(
                [str(mlflow), "server", f"--host={self.host}", "--port", str(self.port), "--workers",
                 str(self.workers), "--backend-store-uri", self.backend, "--artifacts-destination",
                 str(self.root / "artifacts"), *(["--gunicorn-opts", GUNICORN_OPTS] if self.gunicorn else [])],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                env={**os.environ, "MLFLOW_TRACKING_URI": "", **QUIET_SERVER_ENV})
        end = time.monotonic() + timeout_s
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=2)
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"mlflow server on {self.backend.split('://')[0]} exited") from None
                if time.monotonic() > end:
                    self.stop()
                    raise TimeoutError(f"mlflow server not up after {timeout_s:.0f} s") from None
                time.sleep(0.3)

    def stop(self) -> None:
        # A second Ctrl-C while it stops (`grokray ui`) must not leave the server running: ignored meanwhile.
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            if self.proc is not None and (self.proc.poll() is None or group_alive(self.proc.pid)):
                # SIGINT: gunicorn's quick shutdown (SIGTERM is its graceful one, which waits up to 30 s on idle
                # keep-alive connections); the whole group, so its uvicorn/gunicorn workers go with it. Started from
                # a background shell, the group ignores SIGINT: then SIGTERM, then SIGKILL.
                for sig, wait_s in ((signal.SIGINT, 3), (signal.SIGTERM, 5), (signal.SIGKILL, 30)):
                    try:
                        os.killpg(self.proc.pid, sig)
                    except ProcessLookupError:
                        break  # the group ended between the checks
                    if _group_ended(self.proc, wait_s):
                        break
            self.proc = None
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def __enter__(self) -> MlflowServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
