"""`open_tracker(uri)`: the one place a tracking URI becomes a Tracker (grokray.contracts.Tracker). MLflow serves every
URI MLflow takes; `memory://` is the in-memory store of tracking/memory.py. A new backend adds its scheme here."""

from __future__ import annotations

import os

from ..contracts import Tracker


def quiet_store_notices() -> None:
    """The store's own notices that ask nothing of the user (MLflow's INFO "Creating initial MLflow database
    tables") kept out of a command's output; set before the store is first imported (the user's setting wins)."""
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")


def open_tracker(uri: str, spooled: bool = False, prepare: bool = False) -> Tracker:
    """The store at `uri`. `spooled`: for a launch's writers, whose spool holds what the store does not take, so a
    server that is away is given up on in seconds. `prepare`: the launch's driver, once, before anything else opens
    the store (a new SQLite file made ready); the packs' workers do not repeat it."""
    if uri.startswith("memory:"):
        from .memory import open_memory

        return open_memory(uri)
    from .mlflow_tracker import MlflowTracker

    return MlflowTracker(uri, spooled=spooled, prepare=prepare)
