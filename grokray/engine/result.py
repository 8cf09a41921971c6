"""What training one configuration gives back, the same for every trainer, and the checkpoint functions that
every trainer's state_dict goes through."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..contracts import CURVE_METRICS
from ..models import MODELS
from ..models.diagnostics import RQI_THRESHOLD
from ..phases import crossing_metrics, summary_metric
from ..spec.blocks import OptimConfig

METRICS = CURVE_METRICS
SPLIT_FIELDS = ("train_fraction", "train_size", "split_seed")


@dataclass
class MemberResult:
    phase: str
    step_train: int | None
    step_val: int | None
    gap: int | None
    steps_run: int
    final: dict[str, float]
    curve: dict[str, list] = field(default_factory=dict)  # "step" plus one list per metric
    ideal_val_acc: float | None = None  # the best val accuracy the split allows (Liu's ideal accuracy), if known

    def summary(self, threshold: float = 0.9) -> dict[str, float]:
        """Summary metrics with the names STYLE.md fixes: step_train_acc_0.9, step_val_acc_0.9, grokking_gap."""
        out = {f"final/{k}": v for k, v in self.final.items()}
        for key, value in zip(crossing_metrics(threshold), (self.step_train, self.step_val), strict=True):
            if value is not None:
                out[key] = value
        if self.gap is not None:
            out["grokking_gap"] = self.gap
        out["steps_run"] = self.steps_run
        if self.ideal_val_acc is not None:
            out["ideal_val_acc"] = self.ideal_val_acc
        formed = [s for s, v in zip(self.curve.get("step", []), self.curve.get("rqi", []), strict=False)
                  if v is not None and v > RQI_THRESHOLD]
        if formed:  # Liu's "steps to RQI > 0.95": the first recorded step where the representation had formed
            out[summary_metric("step_rqi", RQI_THRESHOLD)] = formed[0]
        return out


def pack_signature(cfg) -> str:
    """Configs with equal signatures can share a pack: everything but the per-member fields must agree."""
    d = cfg.to_dict()
    family = MODELS.get(cfg.model.registry_name).build
    d.pop("seed")
    d.pop("phases")
    for f in SPLIT_FIELDS:
        d["task"].pop(f, None)
    for f in family.per_member_fields:
        d["model"].pop(f, None)
    for group in d["optim"].values():
        for f in OptimConfig.per_member_fields():
            group.pop(f)
    d["train"].pop("steps")
    d["train"].pop("weight_norm")  # per member: a target norm, or NaN for none
    return repr(sorted(d.items()))


class CheckpointDamaged(Exception):
    """A checkpoint that does not read back as it was written: its digest differs, or it does not load."""


def _digest(path: Path) -> str:
    data = path.read_bytes()
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}"


def digest_path(path) -> Path:
    return Path(f"{path}.sha256")


def save_checkpoint(trainer, path) -> None:
    """Any trainer (PackTrainer, RfmTrainer, ...): its state_dict holds tensors, lists and numbers only. Beside it,
    its size and SHA-256 as read back from the disk, so a write that did not land whole is found when read."""
    torch.save(trainer.state_dict(), path)
    digest_path(path).write_text(_digest(Path(path)))


def load_checkpoint(trainer, path) -> None:
    """Restore with weights_only=True: a crafted pickle in a checkpoint cannot run code. A CheckpointDamaged if
    the file is not what was written (its digest, where one was written) or does not load into this trainer."""
    path = Path(path)
    digest = digest_path(path)
    try:  # a digest that is garbage too (not ASCII) or cannot be read: the checkpoint cannot be trusted either
        expected = digest.read_bytes().decode("ascii").strip() if digest.exists() else None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointDamaged(f"{digest.name}, its digest, does not read: {type(exc).__name__}") from None
    if not path.is_file() or (expected is not None and _digest(path) != expected):
        raise CheckpointDamaged(f"{path.name} is missing or differs from what was written (size and SHA-256)")
    try:
        state = torch.load(path, map_location=trainer.device, weights_only=True)
        trainer.load_state_dict(state)
    except Exception as exc:  # noqa: BLE001 - whatever a damaged file raises (unpickling, zip, shapes, keys)
        raise CheckpointDamaged(f"{path.name} does not load: {type(exc).__name__}: {str(exc)[:200]}") from None
