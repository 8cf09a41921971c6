"""Stacked optimizers (one per parameter group) assembled from `primitives`."""

from .group import GroupOptimizer, MemberRandom

__all__ = ["GroupOptimizer", "MemberRandom"]
