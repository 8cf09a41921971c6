"""Driver work done while Ray starts: `ray.init` takes seconds, mostly waiting for its processes, and so do
importing MLflow's SQL store and Tune's controller and opening the tracking store (a new SQLite file runs MLflow's
schema migrations). On a laptop-sized sweep those seconds are a visible share of the wall time
(benchmarks/bench_sweep.py: the driver's time from Ray up to `Tuner.fit` fell from 2.4 to 1.1 s).

Workers are not warmed: Ray 2.60 starts a fresh process for every actor, Tune's trials included (measured: not
even a plain actor without a runtime env takes one of the idle prestarted workers), so a warm-up task would import
into processes the trials never use. Instead each slot's process is kept for its next trial (`reuse_actors` in
launch.py), so a launch pays those imports once per slot, not once per pack."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ..tracking.trackers import warm_store


def _warm_up(uri: str, then: Callable | None):
    # a warm-up only: the real imports report any problem where it matters
    try:
        warm_store(uri)  # the store's own modules, asked of its backend (memory:// has none)
    except ImportError:
        pass
    try:
        import ray.tune.execution.tune_controller  # noqa: F401  (Tune's controller: the Tuner's import)
    except ImportError:
        pass
    return then() if then is not None else None


def driver_imports_in_background(uri: str, then: Callable | None = None) -> Future:
    """Import the driver's heavy modules (the store at `uri`'s, Tune's controller) in a background thread, then call
    `then()` there (its result is the future's). One thread for both: two threads importing MLflow's circular
    modules at once can deadlock."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="grokray-warm")
    future = pool.submit(_warm_up, uri, then)
    pool.shutdown(wait=False)
    return future
