"""Training engine: one configuration or a pack of them, with checkpoints. No Ray, MLflow or Optuna here."""

from .pack import PackTrainer
from .result import METRICS, CheckpointDamaged, MemberResult, load_checkpoint, pack_signature, save_checkpoint
from .rfm import RfmTrainer
from .trainers import make_trainer, max_pack_size, trainer_class
from .trial import run_trial

__all__ = ["METRICS", "CheckpointDamaged", "MemberResult", "PackTrainer", "RfmTrainer", "load_checkpoint",
           "make_trainer", "max_pack_size", "pack_signature", "run_trial", "save_checkpoint", "trainer_class"]
