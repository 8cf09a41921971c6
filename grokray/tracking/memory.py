"""A Tracker held in one process's memory, for tests: the same contract as MLflow's (tests/test_tracker_contract.py),
with nothing on disk but its socket.

`open_tracker("memory://")` makes one and serves it on a Unix socket in a private temporary folder; its `uri`
(memory:///tmp/grokray-memory-...) names that folder, so the launch's driver, its Ray workers and `analyze` all
reach the same store: the process that made it holds it, the others forward each call over the socket
(multiprocessing.connection, with a key only the folder's owner can read). It lives as long as that process.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import tempfile
import threading
import uuid
from multiprocessing.connection import Client, Listener
from pathlib import Path

from .client import now_ms
from .records import Point, RunNotFound, RunQuery, RunRecord, RunStatus

SCHEME = "memory://"
_HELD: dict[str, MemoryTracker] = {}  # uri -> the stores this process holds
_PEERS: dict[str, RemoteTracker] = {}  # uri -> one connection per process to a store another process holds


def latest(points: list[Point]) -> Point:
    """A metric's latest point, as MLflow picks it: the largest step, then the latest timestamp."""
    return max(points, key=lambda p: (p.step, p.timestamp_ms))


class MemoryTracker:
    """Experiments, runs, curves and artifacts in dicts, behind one lock (a pack's courier sends from threads)."""

    def __init__(self, uri: str = SCHEME):
        self.uri = uri
        self._lock = threading.RLock()
        self._experiments: dict[str, dict] = {}  # id -> {"name", "deleted"}
        self._runs: dict[str, dict] = {}  # id -> the run's fields, its curves (key -> [Point]) and artifacts
        self._ids = itertools.count()

    # -- experiments ---------------------------------------------------------------------------------------------
    def experiment_id(self, name: str) -> str | None:
        with self._lock:
            return next((i for i, e in self._experiments.items() if e["name"] == name and not e["deleted"]), None)

    def ensure_experiment(self, name: str) -> str:
        with self._lock:
            for i, e in self._experiments.items():
                if e["name"] == name:
                    e["deleted"] = False
                    return i
            exp_id = str(next(self._ids))
            self._experiments[exp_id] = {"name": name, "deleted": False}
            return exp_id

    def experiments(self) -> dict[str, str]:
        with self._lock:
            return {i: e["name"] for i, e in self._experiments.items() if not e["deleted"]}

    # -- runs ----------------------------------------------------------------------------------------------------
    def create_run(self, experiment_id: str, name: str, tags: dict[str, str], start_ms: int | None,
                   parent_id: str | None = None) -> str:
        with self._lock:
            if experiment_id not in self._experiments:
                raise ValueError(f"no experiment {experiment_id!r} in {self.uri}")
            run_id = uuid.uuid4().hex
            self._runs[run_id] = {"experiment_id": experiment_id, "status": RunStatus.RUNNING.value,
                                  "start_ms": start_ms if start_ms is not None else now_ms(), "end_ms": None,
                                  "params": {}, "tags": dict(tags), "name": name or run_id[:8], "curves": {},
                                  "artifacts": {}, "parent_id": parent_id}
            return run_id

    def _run(self, run_id: str) -> dict:
        run = self._runs.get(run_id)
        if run is None:
            raise RunNotFound(run_id)
        return run

    def _record(self, run_id: str, run: dict) -> RunRecord:
        values = {k: latest(points).value for k, points in run["curves"].items() if points}
        return RunRecord(run_id, run["name"], run["experiment_id"], run["status"],
                         run["start_ms"], run["end_ms"], dict(run["params"]), dict(run["tags"]), values,
                         run["parent_id"])

    def get_run(self, run_id: str) -> RunRecord:
        with self._lock:
            return self._record(run_id, self._run(run_id))

    def search(self, experiment_ids: list[str], query: RunQuery, page_size: int = 1000,
               page_token: str | None = None) -> tuple[list[RunRecord], str | None]:
        with self._lock:
            found = [self._record(i, r) for i, r in self._runs.items() if r["experiment_id"] in experiment_ids]
        found = sorted((r for r in found if query.matches(r)), key=lambda r: (-(r.start_ms or 0), r.run_id))
        start = int(page_token or 0)
        end = start + page_size
        return found[start:end], str(end) if end < len(found) else None

    def log(self, run_id: str, points: list | None = None, params: dict[str, str] | None = None,
            tags: dict[str, str] | None = None) -> int:
        with self._lock:
            run = self._run(run_id)
            for key, value in (params or {}).items():
                if run["params"].get(key, value) != value:  # as MLflow: a param, once logged, is fixed
                    raise ValueError(f"param {key!r} of run {run_id} is {run['params'][key]!r}, not {value!r}")
            run["params"].update(params or {})
            run["tags"].update(tags or {})
            for key, value, ts, step in points or []:
                run["curves"].setdefault(key, []).append(Point(int(step), float(value), int(ts)))
            return 1

    def delete_tag(self, run_id: str, key: str) -> None:
        with self._lock:
            self._run(run_id)["tags"].pop(key, None)

    def rename_run(self, run_id: str, name: str) -> None:
        with self._lock:
            self._run(run_id)["name"] = name

    def set_status(self, run_id: str, status: RunStatus, end_ms: int | None = None) -> None:
        status = RunStatus(status)
        with self._lock:
            run = self._run(run_id)
            run["status"] = status.value
            run["end_ms"] = None if status is RunStatus.RUNNING else end_ms if end_ms is not None else now_ms()

    def delete_run(self, run_id: str) -> None:
        with self._lock:
            self._run(run_id)
            del self._runs[run_id]

    # -- curves and artifacts ------------------------------------------------------------------------------------
    def curve(self, run_id: str, key: str) -> list[Point]:
        with self._lock:
            return sorted(self._run(run_id)["curves"].get(key, []), key=lambda p: p.step)

    def latest_steps(self, run_id: str) -> dict[str, int]:
        with self._lock:
            return {k: latest(points).step for k, points in self._run(run_id)["curves"].items() if points}

    def artifact_paths(self, run_id: str, folder: str | None = None) -> list[str]:
        prefix = f"{folder.strip('/')}/" if folder else ""
        with self._lock:
            paths = list(self._run(run_id)["artifacts"])
        return sorted({prefix + p[len(prefix):].split("/")[0] for p in paths if p.startswith(prefix)})

    def log_artifact(self, run_id: str, local: str | Path, folder: str | None = None) -> None:
        data = Path(local).read_bytes()
        path = f"{folder.strip('/')}/{Path(local).name}" if folder else Path(local).name
        with self._lock:
            self._run(run_id)["artifacts"][path] = data

    def log_text(self, run_id: str, text: str, path: str) -> None:
        with self._lock:
            self._run(run_id)["artifacts"][path.strip("/")] = text.encode()

    def download(self, run_id: str, path: str, dst: str | Path) -> Path:
        path = path.strip("/")
        with self._lock:
            files = {p: b for p, b in self._run(run_id)["artifacts"].items() if p == path or p.startswith(path + "/")}
        if not files:
            raise FileNotFoundError(f"run {run_id} has no artifact {path!r}")
        local = Path(dst) / Path(path).name  # under its own name, as MLflow downloads it
        for p, data in files.items():
            target = local / p[len(path) + 1:] if p != path else local
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return local


METHODS = ("experiment_id", "ensure_experiment", "experiments", "create_run", "get_run", "search", "log",
           "delete_tag", "rename_run", "set_status", "delete_run", "curve", "latest_steps", "artifact_paths",
           "log_artifact", "log_text", "download")


def _serve(tracker: MemoryTracker, listener: Listener) -> None:
    """Answer every connection, each on a thread of its own: a call is (method, args, kwargs); the answer is
    ("ok", value) or ("error", the exception), raised again on the caller's side."""
    def answer(conn) -> None:
        with conn:
            while True:
                try:
                    name, args, kwargs = conn.recv()
                except (EOFError, OSError):
                    return
                if name not in METHODS:
                    conn.send(("error", AttributeError(name)))
                    continue
                try:
                    conn.send(("ok", getattr(tracker, name)(*args, **kwargs)))
                except Exception as exc:  # noqa: BLE001 - handed to the caller, which raises it
                    conn.send(("error", exc))

    while True:
        try:
            conn = listener.accept()
        except OSError:
            return
        threading.Thread(target=answer, args=(conn,), daemon=True, name="grokray-memory-tracker").start()


def _close(listener: Listener, folder: Path) -> None:
    listener.close()  # removes its socket first (removing the folder under it would fail its own clean-up)
    shutil.rmtree(folder, ignore_errors=True)


def _folder(uri: str) -> Path:
    return Path(uri[len(SCHEME):])


def make_memory_tracker() -> MemoryTracker:
    """A new store, served to the other processes of this machine (see the module doc)."""
    folder = Path(tempfile.mkdtemp(prefix="grokray-memory-", dir="/tmp" if Path("/tmp").is_dir() else None))
    key = os.urandom(32)
    (folder / "key").write_bytes(key)
    os.chmod(folder / "key", 0o600)
    listener = Listener(str(folder / "socket"), family="AF_UNIX", authkey=key)
    tracker = MemoryTracker(f"{SCHEME}{folder}")
    threading.Thread(target=_serve, args=(tracker, listener), daemon=True, name="grokray-memory-accept").start()
    atexit.register(_close, listener, folder)
    _HELD[tracker.uri] = tracker
    return tracker


class RemoteTracker:
    """A store another process holds: each Tracker method sends its call over one connection (a lock keeps the
    calls of this process's threads apart) and returns the answer."""

    def __init__(self, uri: str):
        self.uri = uri
        folder = _folder(uri)
        if not (folder / "socket").exists():
            raise ConnectionRefusedError(f"no memory tracker at {uri} (its process ended)")
        self._conn = Client(str(folder / "socket"), family="AF_UNIX", authkey=(folder / "key").read_bytes())
        self._lock = threading.Lock()

    def _call(self, name: str, *args, **kwargs):
        with self._lock:
            self._conn.send((name, args, kwargs))
            outcome, value = self._conn.recv()
        if outcome == "error":
            raise value
        return value


def _forwarder(name: str):
    def call(self, *args, **kwargs):
        return self._call(name, *args, **kwargs)

    call.__name__ = name
    call.__doc__ = getattr(MemoryTracker, name).__doc__
    return call


for _name in METHODS:
    setattr(RemoteTracker, _name, _forwarder(_name))


def open_memory(uri: str):
    """`memory://`: a new store; `memory:///PATH`: the store made there, held here or reached over its socket."""
    if uri.rstrip("/") == SCHEME.rstrip("/"):
        return make_memory_tracker()
    if uri in _HELD:
        return _HELD[uri]
    if uri not in _PEERS:
        _PEERS[uri] = RemoteTracker(uri)
    return _PEERS[uri]
