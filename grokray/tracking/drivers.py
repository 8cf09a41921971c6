"""Which driver runs a launch, and whether it died: a parent run carries its driver's host:pid (DRIVER_TAG), so a
parent left RUNNING by a driver that was SIGKILLed (or met the OOM killer) on this machine can be told apart from
one whose driver still runs. No MLflow here: the readers (analysis, replay) ask it of the records they hold."""

from __future__ import annotations

import os
import socket

from .records import RunRecord
from .schema import DRIVER_TAG, KIND_TAG, driver_of


def driver_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def driver_died(driver: str) -> bool:
    """Is this driver (host:pid) a process of this machine that no longer runs? Unknown or remote: False."""
    host, _, pid = driver.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except OSError as exc:  # gone; or alive, another user's (PermissionError)
        return isinstance(exc, ProcessLookupError)
    return False


def dead_driver_pid(run: RunRecord) -> str | None:
    """The pid of the driver that died on this machine (SIGKILL, the OOM killer) leaving this parent RUNNING, else
    None (a live driver, or another machine's: those cannot be told apart from here)."""
    driver = run.tags.get(DRIVER_TAG, "")
    return driver.rpartition(":")[2] if run.status == "RUNNING" and driver_died(driver) else None


def left_by_dead_driver(run: RunRecord) -> str | None:
    """The one line, with how to close it, for a parent a dead driver left RUNNING (dead_driver_pid); None for any
    other run. Every command that reads a launch says it: run, analyze, replay (--resume says it continues)."""
    pid = dead_driver_pid(run)
    if pid is None:
        return None
    kind = driver_of(run.tags.get(KIND_TAG)).kind
    return (f"grokray: the {kind} launch {run.name!r} (parent run {run.run_id[:8]}) was left RUNNING by a driver "
            f"that died (pid {pid} on this machine): `grokray {driver_of(kind).command} SPEC "
            "--resume` continues it and closes it; a new launch of the same spec closes it as KILLED")
