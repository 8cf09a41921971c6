"""How a launch's driver takes SIGTERM: as Ctrl-C, so a stopped launch can be resumed cleanly."""

from __future__ import annotations

import os
import signal
import threading

STOP_BEAT_ENV = "GROKRAY_STOP_BEAT"  # a file the driver touches as its stop goes on; the supervisor names it


def sigterm_as_ctrl_c() -> None:
    """SIGTERM (`ray job stop`, a batch scheduler, `kill PID`) stops a launch the way Ctrl-C does: Tune saves its
    experiment state, the parent run ends KILLED and `--resume` continues. Python's default, and the handler
    `ray.init` installs, end the driver at once, leaving runs RUNNING and Tune's state as old as its last save.
    Called at the CLI's start and again after `ray.init`."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _as_ctrl_c)


def _as_ctrl_c(signum, frame) -> None:
    """What Ctrl-C would do now; a KeyboardInterrupt where SIGINT is ignored or left to the OS (started in the
    background, SIGINT is ignored: re-raising it dropped the SIGTERM, and `grokray ui` served on)."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def stop_beat() -> None:
    """Tell the supervisor the stop is still making progress (a page of the close, the figure). It waits as long
    as the beats come, so the close of a 10^5-run launch outlasts GROKRAY_STOP_WAIT_S while a hung one does not."""
    path = os.environ.get(STOP_BEAT_ENV)
    if path:
        try:
            os.utime(path)
        except OSError:  # the supervisor is gone, or its file is: nobody is waiting on the beat
            pass


def stops_end(event: threading.Event) -> threading.Event:
    """From here on SIGINT and SIGTERM set `event` (a launch's close: they end its wait for a tracking server
    that is away, and the close goes on to say how to deliver the rest). Tune's fit leaves a SIGINT handler of
    its own that only flags a Tune run which is over; this replaces it. Returns `event`."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, frame: event.set())
    return event


CLOSED = "closed"  # what the beat file holds once the launch's record is closed


def ignore_stops() -> None:
    """A launch's record is closed: SIGINT and SIGTERM have nothing left to stop until Ray is down and the CLI has
    said how it ended, so they are ignored (a stop in those last seconds turned exit 0 into 143, the phase table
    unprinted), and the supervisor is told not to pass them on: ray.shutdown() resets SIGTERM to the default in
    C, under Python's handler, so only a signal that never reaches the driver is safe. take_stops() restores
    them."""
    path = os.environ.get(STOP_BEAT_ENV)
    if path:
        try:
            with open(path, "w") as fh:
                fh.write(CLOSED)
        except OSError:  # the supervisor is gone, or its file is
            pass
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def is_closed(beat_path: str) -> bool:
    """Whether the driver behind this beat file has closed its launch's record (the supervisor asks)."""
    try:
        with open(beat_path) as fh:
            return fh.read() == CLOSED
    except OSError:
        return False


def take_stops() -> None:
    """Ctrl-C as KeyboardInterrupt, SIGTERM as Ctrl-C again (ray.shutdown may also have reset SIGTERM)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sigterm_as_ctrl_c()
