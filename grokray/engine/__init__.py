"""Training engine: one configuration or a pack of them, with checkpoints. No Ray, MLflow or Optuna here."""

from .pack import METRICS, MemberResult, PackTrainer, load_checkpoint, pack_signature, save_checkpoint
from .trial import run_trial

__all__ = ["METRICS", "MemberResult", "PackTrainer", "load_checkpoint", "pack_signature", "run_trial", "save_checkpoint"]
