"""Planning, pure: what a sweep will train and what it will cost, before anything starts.

expand (spec -> configurations -> packs), estimate (wall time, given measured history), lattice (the adaptive:
block), refine (which lattice points to train next). No Ray, MLflow or Optuna.
"""

from .expand import Member, Pack, Plan, expand, run_name

__all__ = ["Member", "Pack", "Plan", "expand", "run_name"]
