"""Which trainer trains a configuration: the family declares a kind (contracts.Family.trainer), the engine maps
it to a class, so models/ never imports the engine."""

from __future__ import annotations

from ..contracts import Trainer
from ..models import MODELS
from .pack import PackTrainer
from .rfm import RfmTrainer

TRAINERS: dict[str, type] = {"pack": PackTrainer, "rfm": RfmTrainer}


def family(config):
    return MODELS.get(config.model.registry_name).build


def trainer_class(config) -> type:
    return TRAINERS[family(config).trainer]


def max_pack_size(config) -> int | None:
    """None: any size. Families that cannot stack members (rfm) declare `max_pack_size = 1`."""
    return family(config).max_pack_size


def make_trainer(configs: list, device: str = "cpu") -> Trainer:
    return trainer_class(configs[0])(configs, device=device)
