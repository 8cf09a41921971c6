"""grokray: distributed hyperparameter sweeps of the models from the grokking literature.

From Python: `grokray.sweep(spec)` launches a spec and returns its runs as a DataFrame; `grokray.train_pack(spec)`
trains it in this process and returns each member's curves and parameters; `grokray.load(spec)` checks it
(grokray/api.py). They load on first use, so `import grokray` stays light for the CLI and the Tune workers.
"""

__all__ = ["PackResult", "load", "sweep", "train_pack"]


def __getattr__(name: str):
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'grokray' has no attribute {name!r}")
