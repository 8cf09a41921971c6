"""How a launch's driver takes SIGTERM: as Ctrl-C, so a stopped launch can be resumed cleanly."""

from __future__ import annotations

import signal
import threading


def sigterm_as_ctrl_c() -> None:
    """SIGTERM (`ray job stop`, a batch scheduler, `kill PID`) stops a launch the way Ctrl-C does: Tune saves its
    experiment state, the parent run ends KILLED and `--resume` continues. Python's default, and the handler
    `ray.init` installs, end the driver at once, leaving runs RUNNING and Tune's state as old as its last save.
    Called at the CLI's start and again after `ray.init`."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: signal.raise_signal(signal.SIGINT))
