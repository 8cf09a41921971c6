"""A launch that starts its own Ray runs its driver in a session of its own, behind this thin supervisor.

Why: `timeout`, systemd and `kill -- -PGID` send SIGTERM to the whole process group. When the driver and the
Ray processes it starts share that group, Ray's GCS dies with the signal and the driver cannot stop cleanly (its
parent and children stay RUNNING, no resume hint). Behind the supervisor only the supervisor is in the user's
group: it passes SIGINT, SIGTERM and SIGHUP on to the driver, which stops as on Ctrl-C while Ray is still up.
When the driver has ended, however it ended (SIGKILL included), the supervisor kills whatever is left in the
driver's session, so no Ray process outlives a launch. A driver whose supervisor was killed stops itself.
`GROKRAY_SUPERVISE=0` turns this off (the tests that call the CLI in-process do).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from .run.signals import STOP_BEAT_ENV, is_closed

SUPERVISED_ENV = "GROKRAY_SUPERVISED"  # set in the driver the supervisor started
SUPERVISE_ENV = "GROKRAY_SUPERVISE"  # "0": run the driver in this process
STOP_WAIT_ENV = "GROKRAY_STOP_WAIT_S"  # how long a stop may go without progress before the session is killed
DEFAULT_STOP_WAIT_S = 45.0
LAUNCH_COMMANDS = ("run", "search", "atlas")


def wanted(args) -> bool:
    """A launch command that would start a private local Ray, in a process that is not already the driver."""
    if os.name != "posix" or args.command not in LAUNCH_COMMANDS or getattr(args, "dry_run", False):
        return False
    if os.environ.get(SUPERVISED_ENV) == "1" or os.environ.get(SUPERVISE_ENV) == "0":
        return False
    if getattr(args, "address", None) or os.environ.get("RAY_ADDRESS"):
        return False  # a cluster's processes are not ours to stop
    ray = sys.modules.get("ray")
    return not (ray is not None and ray.is_initialized())


def supervise(argv: list[str], command: list[str] | None = None) -> int:
    """Run `grokray argv` as the driver in a new session; pass stop signals on; clean its session up after.
    After a stop signal the driver is killed once it has gone GROKRAY_STOP_WAIT_S without a beat (its close
    touches a file per page of runs: run.signals.stop_beat), not after a fixed time from the signal. A signal after
    the driver closed its record (run.signals.ignore_stops) is not passed on: the launch ends as it would have."""
    fd, beat = tempfile.mkstemp(prefix="grokray-stop-beat-")
    os.close(fd)
    driver = subprocess.Popen([*(command or [sys.executable, "-m", "grokray"]), *argv],
                              env={**os.environ, SUPERVISED_ENV: "1", STOP_BEAT_ENV: beat}, start_new_session=True)
    stopping: list[float] = []

    def pass_on(signum, frame):
        if is_closed(beat):  # the launch is closed: a stop changes nothing, and the driver exits as it ends
            return
        stopping.append(time.time())
        try:  # a hang-up (the terminal closed) stops the launch as SIGTERM does, cleanly
            os.kill(driver.pid, signal.SIGTERM if signum == signal.SIGHUP else signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pass_on)
    stop_wait = float(os.environ.get(STOP_WAIT_ENV, DEFAULT_STOP_WAIT_S))
    try:
        while True:
            try:
                code = driver.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if stopping and time.time() - max(stopping[0], _last_beat(beat)) > stop_wait:
                    print(f"grokray: the launch made no progress in stopping for {stop_wait:g} s ({STOP_WAIT_ENV});"
                          " killed. `--resume` or `grokray replay` closes what it left RUNNING", file=sys.stderr)
                    _kill_session(driver.pid)
                    code = driver.wait()
                    break
    finally:
        os.unlink(beat)
    _kill_session(driver.pid)  # Ray's agents and any worker the driver's shutdown missed
    return code if code >= 0 else 128 - code


def _last_beat(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def process_table() -> dict[int, tuple[str, int, int, int]]:
    """pid -> (state, parent pid, process group, session) of every process (Linux /proc; empty elsewhere)."""
    table = {}
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                state, ppid, pgrp, sid = fh.read().rsplit(")", 1)[1].split()[:4]
        except (OSError, ValueError):
            continue
        table[int(entry.name)] = (state, int(ppid), int(pgrp), int(sid))
    return table


def session_members(sid: int) -> list[int]:
    """Processes of session `sid` (Ray's workers make process groups of their own, but stay in it)."""
    return [pid for pid, (_, _, _, session) in process_table().items() if session == sid]


def _kill_session(sid: int) -> None:
    for pid in session_members(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def watch_supervisor() -> None:
    """In the driver: if the supervisor dies (SIGKILL), stop as on SIGTERM instead of running on unseen."""
    if os.environ.get(SUPERVISED_ENV) != "1":
        return
    first = os.getppid()

    def watch():
        while os.getppid() == first:
            time.sleep(1.0)
        try:  # the supervisor's beat file: nobody will remove it now (no file left in /tmp)
            os.unlink(os.environ.get(STOP_BEAT_ENV, ""))
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="grokray-supervisor-watch", daemon=True).start()
