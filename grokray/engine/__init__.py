"""Training engine: one configuration or a pack of them, with checkpoints. No Ray, MLflow or Optuna here."""

from ..models import MODELS
from .pack import METRICS, MemberResult, PackTrainer, load_checkpoint, pack_signature, save_checkpoint
from .trial import run_trial


def trainer_class(config):
    """Gradient families use PackTrainer; others (rfm) register their own with `trainer=`."""
    return MODELS.get(config.model.registry_name).extra.get("trainer", PackTrainer)


def max_pack_size(config) -> int | None:
    """None: any size. Families that cannot stack members (rfm) register `max_pack_size=1`."""
    return MODELS.get(config.model.registry_name).extra.get("max_pack_size")


def make_trainer(configs: list, device: str = "cpu"):
    return trainer_class(configs[0])(configs, device=device)


__all__ = ["METRICS", "MemberResult", "PackTrainer", "load_checkpoint", "make_trainer", "max_pack_size",
           "pack_signature", "run_trial", "save_checkpoint", "trainer_class"]
