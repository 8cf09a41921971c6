"""Gradient transforms: one file per de-grokking method that rewrites the gradient before the update, each
registering the fields it reads and the state it keeps (base.py), as optimizer kinds register theirs (kinds/)."""

from . import grokfast_ema, grokfast_ma, orthogonal  # noqa: F401  (each registers its transform)
from .base import (
                   TRANSFORMS,
                   GradTransform,
                   Setting,
                   TransformState,
                   asked_transforms,
                   declared_settings,
                   readers,
                   register,
                   switch_values,
                   unregister,
)

__all__ = ["TRANSFORMS", "GradTransform", "Setting", "TransformState", "asked_transforms", "declared_settings",
           "readers", "register", "switch_values", "unregister"]
