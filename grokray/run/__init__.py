"""The launch layer: the only package that imports `ray.tune` and calls `ray.init` / `Tuner(`.

launch (Launch: Ray, the parent run, rounds of Tune runs, the close), cluster (Ray up, GPU checks), context (the
TrialContext every trial gets), trainable (train_pack), progress (the live line), and one module per driver:
grid (`grokray run`), adaptive (rounds of refinement), search (`grokray search`). Import the driver you need,
e.g. `from grokray.run.grid import run_sweep`; this package itself imports nothing heavy.
"""

from .options import LaunchOptions, LaunchSummary

__all__ = ["LaunchOptions", "LaunchSummary"]
