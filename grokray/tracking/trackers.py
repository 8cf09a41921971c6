"""`open_tracker(uri)`: the one place a tracking URI becomes a Tracker (tracking/records.py). MLflow serves every
URI MLflow takes; `memory://` is the in-memory store of tracking/memory.py. A new backend adds its scheme here.

What a launch asks of a store besides its runs is asked here too, of the URI's backend: whether it is a server
across a network (`is_remote`: the writers' pool, a quick give-up when it is away) and its heavy modules, imported
while Ray starts (`warm_store`)."""

from __future__ import annotations

import os

from .records import Tracker


def quiet_store_notices() -> None:
    """The store's own notices that ask nothing of the user (MLflow's INFO "Creating initial MLflow database
    tables") kept out of a command's output; set before the store is first imported (the user's setting wins)."""
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")


def is_memory(uri: str) -> bool:
    return uri.startswith("memory:")


def is_remote(uri: str) -> bool:
    """A store behind a server (answers over a network, may be away), not a file or database this process opens:
    MLflow's tracking server. Asked without importing the backend (a dry-run's question)."""
    return uri.startswith(("http://", "https://"))


def warm_store(uri: str) -> None:
    """Import the backend's heavy modules (MLflow's SQL store: seconds), so a launch's driver pays them while Ray
    starts; memory:// has none."""
    if is_memory(uri):
        return
    from .mlflow_tracker import import_store_modules

    import_store_modules(uri)


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
    if is_memory(uri):
        from .memory import open_memory

        return open_memory(uri)
    from .mlflow_tracker import MlflowTracker

    return MlflowTracker(uri, spooled=spooled, prepare=prepare)
