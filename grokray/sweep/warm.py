"""Imports done while Ray starts: `ray.init` takes seconds, and so does importing MLflow's SQL store and Tune's
controller. On a laptop-sized sweep those seconds are a visible share of the wall time
(benchmarks/bench_sweep.py: the driver's time before `Tuner.fit` fell from 6.0 to 4.0 s).

Workers are not warmed: a `worker_process_setup_hook` makes Ray start a fresh process for every Tune actor
instead of handing it a prestarted one (measured: 4 s instead of 0.3 s per actor), and warm-up tasks land on
other processes than the actors."""

from __future__ import annotations

import importlib
import threading

DRIVER_MODULES = ("mlflow.store.tracking.sqlalchemy_store", "ray.tune.execution.tune_controller")


def _import_all(names) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:  # a warm-up only: the real import reports any problem where it matters
            pass


def driver_imports_in_background() -> threading.Thread:
    thread = threading.Thread(target=_import_all, args=(DRIVER_MODULES,), name="grokray-warm-imports", daemon=True)
    thread.start()
    return thread

