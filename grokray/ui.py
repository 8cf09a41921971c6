"""`grokray ui`: MLflow's UI (or optuna-dashboard) on this machine's runs, on 127.0.0.1, with the address of the
page to open. `mlflow` is in the project's virtual environment, not on the user's PATH, and MLflow 3's UI opens
on a GenAI page: the printed address goes straight to the sweep's runs."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from .errors import SpecError
from .tracking.client import existing_store
from .tracking.local_servers import MlflowServer, stops_held
from .tracking.store import Store
from .tracking.uri import ui_problem

WHAT_TO_CLICK = """In the runs table: the parent run (the sweep) holds one child run per configuration; expand it
with the + beside its name. Its description says what ran and what came out; its Artifacts tab holds
analysis/phase_diagram.png. A child's Model metrics tab draws its curves (val/acc, train/acc); its tags
hold grokray.phase. To compare runs, tick them and press Compare."""


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((host, port)) != 0


def experiment_page(uri: str, experiment: str | None) -> tuple[str, str]:
    """(experiment id, name) to open: the one named, else the one with the latest grokray sweep."""
    store = Store(uri)
    exps = store.experiments()
    if experiment is not None:
        exp_id = store.experiment_id(experiment)
        if exp_id is None:
            raise SpecError("--experiment", f"no experiment {experiment!r} in {uri}; there are: "
                                            f"{', '.join(exps.values())}")
        return exp_id, experiment
    latest = store.latest_parent(list(exps))
    if latest is None:
        return "", ""
    return latest.experiment_id, exps[latest.experiment_id]


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _stops_interrupt() -> None:
    """From here on Ctrl-C and SIGTERM raise KeyboardInterrupt, which ends in the caller's finally. Set before the
    server starts: CI saw a SIGTERM that came while it started dropped (SIGINT, which the CLI turns SIGTERM into,
    is ignored when started in the background) and `grokray ui` serve on for half an hour."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)  # also when started in the background, where SIGINT is ignored


def _wait(proc: subprocess.Popen) -> None:
    """Block until Ctrl-C or SIGTERM or the server exits."""
    try:
        proc.wait()
    except KeyboardInterrupt:
        pass


def serve_runs_ui(uri: str | None, host: str, port: int, experiment: str | None) -> int:
    resolved = existing_store(uri)
    if problem := ui_problem(resolved):
        raise SpecError("--tracking-uri", problem)
    exp_id, name = experiment_page(resolved, experiment)
    if not _port_free(host, port):
        raise SpecError("--port", f"{host}:{port} is in use (another UI?); choose another with --port")
    with tempfile.TemporaryDirectory() as root:
        server = MlflowServer(root, backend=resolved, host=host, port=port)
        try:  # a Ctrl-C or SIGTERM while it starts (its /health may answer first) must stop it too
            _stops_interrupt()
            server.start()
            page = server.experiment_page(exp_id)
            print(f"MLflow UI on {resolved}: {page}" + (f"   (experiment {name!r})" if name else ""), flush=True)
            print(WHAT_TO_CLICK, flush=True)
            print("Ctrl-C stops it.", flush=True)
            _wait(server.proc)  # the server's process: Ctrl-C, SIGTERM or its own exit ends the wait
        finally:
            server.stop()
    return 0


def serve_optuna(journal: str, host: str, port: int) -> int:
    path = Path(journal)
    if not path.is_file():
        raise SpecError("--optuna", f"no study journal at {journal} (grokray search prints its path)")
    exe = shutil.which("optuna-dashboard", path=str(Path(sys.executable).parent)) or shutil.which("optuna-dashboard")
    if exe is None:
        raise SpecError("--optuna", "optuna-dashboard is not installed: pip install -e '.[dashboard]'")
    if not _port_free(host, port):
        raise SpecError("--port", f"{host}:{port} is in use; choose another with --port")
    _stops_interrupt()
    proc = None
    url = f"http://{host}:{port}"
    try:
        with stops_held():  # a Ctrl-C as the dashboard's process is made finds proc set, so the finally ends it
            proc = subprocess.Popen([exe, str(path), "--storage-class", "JournalFileStorage", "--host", host,
                                     "--port", str(port), "--quiet"], start_new_session=True)
        end = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > end:
                    raise RuntimeError("optuna-dashboard did not start") from None
                time.sleep(0.3)
        print(f"optuna-dashboard on {path}: {url}   (Ctrl-C stops it)", flush=True)
        _wait(proc)
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # its own session: the whole group goes
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
    return 0
