"""Model registry: one file per family, each registering a name, a `<Name>Config` and a PackedModel."""

from ..registry import Registry
from .base import PackedModel

MODELS = Registry("model")

from . import mlp, quadratic, rfm, toy, transformer, two_layer  # noqa: E402,F401  (registers entries)

__all__ = ["MODELS", "PackedModel"]
