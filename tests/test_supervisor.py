"""The supervisor's stop wait counts from the driver's last sign of progress: a close that pages a 10^5-run launch
for minutes must not be killed mid-close (its parent left RUNNING, no runs table), while a driver that hangs must.
Real processes: a supervisor in its own interpreter, signalled as a user's Ctrl-C or `kill` would."""

import os
import signal
import subprocess
import sys
import time

import pytest

DRIVER = """
import signal, sys, time
from grokray.run.signals import stop_beat
stopped = []
signal.signal(signal.SIGTERM, lambda *a: stopped.append(1))
open(sys.argv[1] + "/ready", "w").close()
while not stopped:
    time.sleep(0.05)
for _ in range(12):  # a close of 3.6 s, three times the stop wait
    time.sleep(0.3)
    if sys.argv[2] == "beats":
        stop_beat()
open(sys.argv[1] + "/closed", "w").close()
"""

SUPERVISOR = """
import sys
from grokray.supervisor import supervise
sys.exit(supervise(sys.argv[1:], command=[sys.executable, "-c", {driver!r}]))
"""


def _stop_while_closing(tmp_path, mode: str):
    env = {**os.environ, "GROKRAY_STOP_WAIT_S": "1.2", "TMPDIR": str(tmp_path)}  # the beat file lands here
    env.pop("GROKRAY_SUPERVISE", None)
    sup = subprocess.Popen([sys.executable, "-c", SUPERVISOR.format(driver=DRIVER), str(tmp_path), mode],
                           env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists():
        assert sup.poll() is None and time.monotonic() < deadline, "the driver never started"
        time.sleep(0.05)
    t0 = time.monotonic()
    sup.send_signal(signal.SIGTERM)
    _, err = sup.communicate(timeout=60)
    return sup.returncode, err, time.monotonic() - t0


@pytest.mark.parametrize("mode", ["beats", "silent"])
def test_a_stop_is_waited_for_while_the_driver_beats_and_killed_once_it_goes_silent(tmp_path, mode):
    code, err, took = _stop_while_closing(tmp_path, mode)
    if mode == "beats":  # 3.6 s of close against a 1.2 s wait: it finishes, since each page beats
        assert code == 0, err
        assert (tmp_path / "closed").exists()
        assert "killed" not in err
        assert took >= 3.0
    else:  # the same close without beats is killed 1.2 s after the signal, as a hung driver would be
        assert code == 128 + signal.SIGKILL
        assert not (tmp_path / "closed").exists()
        assert "made no progress in stopping for 1.2 s" in err
        assert took < 3.0
    assert not list(tmp_path.glob("grokray-stop-beat-*")), "the supervisor left its beat file behind"


CLOSED_DRIVER = """
import sys, time
from grokray.run.signals import ignore_stops, take_stops
open(sys.argv[1] + "/ready", "w").close()
time.sleep(0.5)
import signal
ignore_stops()  # the launch's record is closed
signal.signal(signal.SIGTERM, signal.SIG_DFL)  # what ray.shutdown() does to SIGTERM, in C, under Python's handler
open(sys.argv[1] + "/closed", "w").close()
time.sleep(1.5)  # Ray's shutdown, the last seconds a stop used to cut
take_stops()
print("phase table")
"""


def test_a_stop_after_the_close_keeps_the_exit_code_and_the_last_lines(tmp_path):
    """Issue 52: SIGTERM in the last seconds of a finished launch turned exit 0 into 143, the table unprinted.
    Issue 61: it still did, 2-4 s after "done": ray.shutdown() sets SIGTERM back to the default in C, where the
    driver's ignore cannot hold it, so the supervisor no longer passes a stop on once the driver has closed."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("GROKRAY_SUPERVISE", None)
    sup = subprocess.Popen([sys.executable, "-c", SUPERVISOR.format(driver=CLOSED_DRIVER), str(tmp_path)],
                           env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "closed").exists():
        assert time.monotonic() < deadline and sup.poll() is None
        time.sleep(0.05)
    sup.send_signal(signal.SIGTERM)  # passed on to the driver, in its last seconds
    out, _ = sup.communicate(timeout=30)
    assert sup.returncode == 0 and out.strip() == "phase table"
    assert not list(tmp_path.glob("grokray-stop-beat-*"))


def test_a_driver_whose_supervisor_was_killed_removes_its_beat_file(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("GROKRAY_SUPERVISE", None)
    driver = """
import sys, time
from grokray.supervisor import watch_supervisor
watch_supervisor()
open(sys.argv[1] + "/ready", "w").close()
time.sleep(60)
"""
    sup = subprocess.Popen([sys.executable, "-c", SUPERVISOR.format(driver=driver), str(tmp_path)], env=env)
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists():
        assert time.monotonic() < deadline and sup.poll() is None
        time.sleep(0.05)
    assert len(list(tmp_path.glob("grokray-stop-beat-*"))) == 1
    sup.kill()  # SIGKILL: the supervisor cleans nothing up
    sup.wait()
    while list(tmp_path.glob("grokray-stop-beat-*")):  # the driver sees its supervisor gone within a second
        assert time.monotonic() < deadline
        time.sleep(0.1)
