"""Ray Tune adapter. `expand` (spec -> packs -> param_space) is pure; `runner` and `trainable` import Ray.

Import `grokray.sweep.runner` for `run_sweep`; this package itself stays free of Ray so `--dry-run` and the
expansion tests never load it.
"""

from .expand import Member, Pack, Plan, expand, flatten, run_name

__all__ = ["Member", "Pack", "Plan", "expand", "flatten", "run_name"]
