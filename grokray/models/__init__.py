"""Model registry: one file per family, each registering a name, a `<Name>Config` and a PackedModel. A family of the
user's own ("package.module:Class", or an installed package's `grokray.models` entry point) is adopted here."""

import dataclasses

from ..contracts import Family
from ..errors import SpecError
from ..registry import Registry
from .base import PackedModel


def adopt_family(name: str, obj, field: str):
    """The config class of a user's family: a class keeping contracts.Family (a PackedModel subclass does) with a
    `Config` dataclass of its fields. A plain torch module is pointed to the `module` family, which packs it."""
    import torch

    if isinstance(obj, type) and issubclass(obj, torch.nn.Module) and not issubclass(obj, PackedModel) or \
            callable(obj) and not isinstance(obj, type):
        raise SpecError(field, f"{name!r} is a torch module or a function, not a grokray family; train it with "
                        f"model: {{name: module, factory: {name!r}, kwargs: {{...}}}}")
    config = getattr(obj, "Config", None)
    if not (isinstance(obj, type) and isinstance(obj, Family) and dataclasses.is_dataclass(config)):
        raise SpecError(field, f"{name!r} is not a model family: expected a PackedModel subclass (grokray.models.base) "
                        "with a `Config` dataclass of its fields, or model: {name: module, factory: ...} for any "
                        "torch.nn.Module")
    return config


MODELS = Registry("model", adopt_family)

from . import mlp, module, quadratic, rfm, toy, transformer, two_layer  # noqa: E402,F401  (registers entries)

__all__ = ["MODELS", "PackedModel"]
