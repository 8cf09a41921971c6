"""Where the tracking store is: one resolver of --tracking-uri for the CLI, the launch, the dry-run and analysis,
and cheap probes of a store, all without importing MLflow (a dry-run of a store that does not exist yet, or of a
server that is down, must not pay MLflow's seconds of imports)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from urllib.parse import quote, urlsplit

from .trackers import is_remote

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"


def resolve_tracking_uri(uri: str | None = None, cwd: str | Path | None = None) -> str:
    """--tracking-uri, else MLFLOW_TRACKING_URI, else sqlite:///mlflow.db; relative file paths made absolute
    (Ray Tune runs each trial in its own directory, so a relative path would scatter databases)."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
    base = Path(cwd or os.getcwd())
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        rel = uri[len("sqlite:///"):]
        if rel and rel != ":memory:":
            return "sqlite:///" + _absolute(base / rel)
    if "://" not in uri:
        return _absolute(base / uri)
    return uri


def _absolute(path: Path) -> str:
    """The path resolved; one that runs into a loop of symbolic links stays as written (the checks then say the
    folder is not there, instead of a RuntimeError)."""
    try:
        return str(path.resolve())
    except (RuntimeError, OSError):
        return os.path.abspath(path)


def folder_problem(path: str | Path) -> str | None:
    """Why nothing can be written under the folder `path` (see writable_dir_problem), a loop of symbolic links
    included, or None."""
    try:
        resolved = Path(path).resolve()
    except (RuntimeError, OSError):
        return f"{str(path)!r} runs into a loop of symbolic links; name a real folder"
    return writable_dir_problem(resolved)


def local_store_path(uri: str) -> Path | None:
    """The file (SQLite) or directory (file store) of a local tracking URI; None for a server or :memory:."""
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///"):]
        return None if path == ":memory:" else Path(path)
    if "://" not in uri or uri.startswith("file:"):
        return Path(uri.removeprefix("file://"))
    return None


def server_answers(uri: str, timeout_s: float = 2.0) -> bool:
    """Whether an HTTP tracking server answers at all (any HTTP status counts: a proxy without /health is up).
    A restarting `mlflow server` accepts connections before its workers can serve them, and a request sent
    then hangs until its timeout; this probe stands in for it while a backlog waits, so training is not held."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s).close()
        return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


def store_exists(uri: str) -> bool:
    """A local store's file or folder is there, or a server answers (a dry-run must not hang on one that is down)."""
    path = local_store_path(uri)
    if path is not None:
        return path.exists()
    if is_remote(uri):
        return server_answers(uri)
    return True


SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "file", "memory")
ALLOWED = ("sqlite:///PATH, postgresql://..., mysql://..., http(s)://HOST[:PORT], file:PATH or a directory, or "
           "the uri of an in-memory store (memory:///PATH, from grokray.tracking.trackers.open_tracker('memory://'))")


def writable_dir_problem(path: Path) -> str | None:
    """Why nothing can be written under `path` (it need not exist yet), or None. Checked by making and removing a
    temporary folder in its nearest existing ancestor: a read-only or pseudo file system (/proc), or a file in the
    way (/etc/hostname/x), fails here, before anything starts, and nothing is left behind."""
    ancestor = path
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{str(ancestor)!r} is a file, not a folder"
    try:
        tempfile.TemporaryDirectory(dir=ancestor).cleanup()
    except OSError as exc:
        return f"cannot write under {str(ancestor)!r} ({exc.strerror or exc})"
    return None


def scheme_problem(uri: str) -> str | None:
    """What is wrong with a tracking URI's scheme or host (a reading command needs no more), or None."""
    parts = urlsplit(uri) if "://" in uri else None
    scheme = (parts.scheme.split("+")[0] if parts else "file").lower()
    if scheme not in SCHEMES:
        return f"{uri!r} has an unsupported scheme ({scheme or 'none'}); allowed: {ALLOWED}"
    if scheme in ("http", "https") and not parts.hostname:
        return f"{uri!r} names no host; e.g. http://127.0.0.1:5000"
    if scheme == "memory" and not parts.path.strip("/"):
        return (f"{uri!r} names no store: an in-memory store lives in the process that opened it; open one with "
                "grokray.tracking.trackers.open_tracker('memory://') and pass its .uri")
    return None


def ui_problem(uri: str) -> str | None:
    """Why `grokray ui` cannot show this store, or None: an in-memory store lives in the process that made it."""
    if uri.startswith("memory:"):
        return (f"{uri!r} is an in-memory store (for tests): it lives in the process that opened it, and no UI "
                "server can open it; read it there through grokray.tracking.store.Store")
    return None


DATABASES = {"postgresql": "pip install -e '.[postgres]'", "mysql": "pip install mysqlclient (or pymysql, with "
             "mysql+pymysql://)", "mssql": "pip install pyodbc"}  # scheme -> how to install its driver


def memory_store_problem(uri: str) -> str | None:
    """An in-memory store lives in the process that opened it (tracking/memory.py): asked by connecting to its
    socket with its key, so a store whose process ended is said here, not as a ConnectionRefusedError after Ray
    started."""
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Client

    folder = Path(uri[len("memory://"):])
    try:
        Client(str(folder / "socket"), family="AF_UNIX", authkey=(folder / "key").read_bytes()).close()
        return None
    except (OSError, EOFError, AuthenticationError):
        return (f"no process holds the in-memory store {uri!r} (its process ended, or it was opened on another "
                "machine); it lives as long as the process that opened it: open one there with "
                "grokray.tracking.trackers.open_tracker('memory://') and pass its .uri, or use sqlite:///PATH "
                "for a store that outlives the launch")


def database_problem(uri: str, timeout_s: int = 3) -> str | None:
    """Why a database URI (postgresql://, mysql://, mssql://) cannot be opened now, or None; asked with a short
    timeout. A launch writes its parent run to the database before anything trains, so a closed port or a wrong
    password is said in one line here (it was a hang, then hundreds of lines); a server (http) instead may be down
    at the start, and its metrics wait in the spool. SQLAlchemy only: no MLflow import for a dry-run."""
    scheme = urlsplit(uri).scheme.split("+")[0].lower() if "://" in uri else ""
    if scheme == "memory":
        return memory_store_problem(uri)
    if scheme not in DATABASES:
        return None
    try:
        import sqlalchemy

        url = sqlalchemy.engine.make_url(uri)
    except Exception as exc:  # noqa: BLE001 - a URL SQLAlchemy cannot read
        return f"not a database URL ({exc}); e.g. postgresql://USER@HOST:5432/DB"
    args = {"connect_timeout": timeout_s} if scheme in ("postgresql", "mysql") else {}
    try:
        engine = sqlalchemy.create_engine(url, connect_args=args, poolclass=sqlalchemy.pool.NullPool)
        with engine.connect():
            return None
    except ModuleNotFoundError as exc:
        return f"no {scheme} driver is installed ({exc.name}): {DATABASES[scheme]}"
    except Exception as exc:  # noqa: BLE001 - any driver's refusal, said in its own first line
        said = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        return (f"cannot open the database {url.render_as_string(hide_password=True)}: "
                f"{said[0] if said else type(exc).__name__}")


def tracking_uri_problem(uri: str) -> str | None:
    """What is wrong with a resolved tracking URI before anything is written to it, or None: a scheme MLflow
    offers grokray, a server's host, and a local store's folder (which must exist: it is not made for you)."""
    problem = scheme_problem(uri) or database_problem(uri)
    if problem:
        return problem
    path = local_store_path(uri)
    if path is None:
        return None
    folder = path.parent if uri.startswith("sqlite:") else path
    if uri.startswith("sqlite:") and not folder.is_dir():
        return f"the folder of {str(path)!r} does not exist; make it first, or give another path"
    return writable_dir_problem(folder) or (sqlite_file_problem(path) if uri.startswith("sqlite:") else None)


SQLITE_MAGIC = b"SQLite format 3\x00"
FULL_CHECK_MAX_BYTES = 1 << 30  # SQLite's quick_check reads the whole file: ~1 s a GB here; above, header checks only


def sqlite_file_problem(path: Path) -> str | None:
    """What makes an existing SQLite store unreadable, checked read-only before anything starts: a header that is
    not SQLite's, or pages SQLite's quick_check finds damaged or missing (a file cut short).
    A store that is not there yet is no problem (a launch makes it)."""
    import sqlite3

    if not path.is_file() or path.stat().st_size == 0:
        return None
    advice = ("restore it from a copy, or name another store; a launch's undelivered metrics stay in its spool "
              "(`grokray replay` delivers them to the store you name)")
    with path.open("rb") as f:
        header = f.read(100)
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        return f"{path} is not an SQLite database (its header is not SQLite's): {advice}"
    try:
        con = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=30)
        try:
            if path.stat().st_size <= FULL_CHECK_MAX_BYTES:
                verdict = con.execute("PRAGMA quick_check(1)").fetchone()[0]
            else:
                con.execute("SELECT count(*) FROM sqlite_master").fetchone()
                verdict = "ok"
        finally:
            con.close()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            return None  # held by a writer right now: the launch's own open waits for it
        return f"{path} cannot be read by SQLite ({exc}): {advice}"
    except sqlite3.DatabaseError as exc:
        return f"{path} is damaged ({exc}): {advice}"
    verdict = " ".join(verdict.replace("*** in database main ***", "").split())  # one line
    return None if verdict == "ok" else f"{path} is damaged (SQLite's quick_check: {verdict}): {advice}"
