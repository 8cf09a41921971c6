"""The launch layer: the only package that calls `ray.init` and builds a `Tuner(`; beside it only the search's
driver floor (grokray.search.launch: its driver and its Searcher) imports `ray.tune`.

launch (Launch: Ray, the parent run, rounds of Tune runs, the close), cluster (Ray up, GPU checks), progress (the
live line), and the drivers grid (`grokray run`) and adaptive (rounds of refinement); what runs inside a trial
(train_pack, the TrialContext, the pack files) is the worker side, grokray.worker; `grokray search` is a driver
over Launch too, in grokray.search.launch.driver. Import the driver you need, e.g. `from grokray.run.grid import
run_sweep`; this package itself imports nothing heavy.
"""

from .options import LaunchOptions, LaunchSummary

__all__ = ["LaunchOptions", "LaunchSummary"]
