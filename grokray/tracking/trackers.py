"""`open_tracker(uri)`: the one place a tracking URI becomes a Tracker (tracking/records.py). MLflow serves every
URI MLflow takes; `memory://` is the in-memory store of tracking/memory.py. Each is declared as a Backend, and what
a launch asks of a store besides its runs is asked of the URI's backend: whether it is a server across a network
(`is_remote`) and its heavy modules (`warm_store`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from .records import Tracker


def quiet_store_notices() -> None:
    """The store's own notices that ask nothing of the user (MLflow's INFO "Creating initial MLflow database
    tables") kept out of a command's output; set before the store is first imported (the user's setting wins)."""
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")


@dataclass(frozen=True)
class Backend:
    """What a tracking backend is, declared once, so a launch asks the backend and never reads a URI itself: the
    URIs it serves, those of them it reaches across a network (a server that may be away: the writers' pool, a
    quick give-up), how it opens a store, and its heavy modules, imported while Ray starts. Asked without importing
    the backend (a dry-run's questions): its own modules load only to open or warm a store."""

    name: str
    prefixes: tuple[str, ...]  # the URIs it serves, by how they start ("" : any URI no other backend serves)
    remote: tuple[str, ...]  # the URIs of a server across a network
    open: Callable[[str, bool, bool], Tracker]  # (uri, spooled, prepare)
    warm: Callable[[str], None] | None = None


def _open_memory(uri: str, spooled: bool, prepare: bool) -> Tracker:
    from .memory import open_memory

    return open_memory(uri)


def _open_mlflow(uri: str, spooled: bool, prepare: bool) -> Tracker:
    from .mlflow_tracker import MlflowTracker

    return MlflowTracker(uri, spooled=spooled, prepare=prepare)


def _warm_mlflow(uri: str) -> None:
    from .mlflow_tracker import import_store_modules

    import_store_modules(uri)


# A new backend is one more line here and its Tracker in a module of its own (tests/test_tracker_contract.py).
BACKENDS = (
    Backend("memory", ("memory:",), (), _open_memory),
    Backend("mlflow", ("",), ("http://", "https://"), _open_mlflow, _warm_mlflow),  # every URI MLflow takes
)


def backend_of(uri: str) -> Backend:
    return next(b for b in BACKENDS if any(uri.startswith(p) for p in b.prefixes))


def is_remote(uri: str) -> bool:
    """A store behind a server (answers over a network, may be away), not a file or database this process opens."""
    return uri.startswith(backend_of(uri).remote)


def warm_store(uri: str) -> None:
    """Import the backend's heavy modules (MLflow's SQL store: seconds), so a launch's driver pays them while Ray
    starts; memory:// has none."""
    warm = backend_of(uri).warm
    if warm is not None:
        warm(uri)


def open_tracker(uri: str, spooled: bool = False, prepare: bool = False) -> Tracker:
    """The store at `uri` as a Tracker (tracking/records.py): the runs, params, tags and curves grokray wrote, read and
    written the same way whatever the backend.

    Args:
        uri: a tracking URI: sqlite:///FILE, postgresql://..., http://HOST:PORT (an `mlflow server`), or memory://NAME.
        spooled: for a launch's writers, whose spool holds what the store does not take, so a server that is away
            is given up on in seconds.
        prepare: the launch's driver, once, before anything else opens the store (a new SQLite file made ready);
            the packs' workers do not repeat it.

    Example: `grokray.open_tracker("sqlite:///mlflow.db")`
    """
    return backend_of(uri).open(uri, spooled, prepare)
