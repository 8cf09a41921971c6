"""Optimizer kinds: one file per kind, each registering its update, the state it keeps per parameter and the
fields it reads, as the model families register theirs (models/__init__.py). GroupOptimizer asks the kind and
never its name, so a new kind is its own file here, its name in OptimConfig and its tests."""

from . import adam, langevin, muon, normalized_gd, sgd  # noqa: F401  (each registers its kind)
from .base import KINDS, OptimizerKind, fields_read_by_kind, register

__all__ = ["KINDS", "OptimizerKind", "fields_read_by_kind", "register"]
