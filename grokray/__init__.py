"""grokray: distributed hyperparameter sweeps of the models from the grokking literature.

From Python: `grokray.sweep(spec)` launches a spec and returns its runs as a DataFrame; `grokray.train_pack(spec)`
trains it in this process and returns each member's curves and parameters; `grokray.load(spec)` checks it
(grokray/api.py). `grokray.load_runs(experiment)` and `grokray.load_curves(run_ids)` read a store's runs and
curves as DataFrames (analysis/load.py), `grokray.open_tracker(uri)` opens the store itself. They load on first
use, so `import grokray` stays light for the CLI and the Tune workers.
"""

__all__ = ["PackResult", "load", "load_curves", "load_runs", "open_tracker", "sweep", "train_pack"]


def __getattr__(name: str):
    if name in ("PackResult", "load", "sweep", "train_pack"):
        from . import api

        return getattr(api, name)
    if name in ("load_runs", "load_curves"):
        from analysis import load as analysis_load

        return getattr(analysis_load, name)
    if name == "open_tracker":
        from .tracking.trackers import open_tracker

        return open_tracker
    raise AttributeError(f"module 'grokray' has no attribute {name!r}")
