"""Liu et al.'s phase table (appendix A), with the two labels their table leaves implicit made explicit.

| phase             | train >= thr in budget | val >= thr in budget | step(val) - step(train) < gap |
|-------------------|------------------------|----------------------|-------------------------------|
| comprehension     | yes                    | yes                  | yes                           |
| grokking          | yes                    | yes                  | no                            |
| memorization      | yes                    | no                   | -                             |
| confusion         | no                     | no                   | -                             |
| val_without_train | no                     | yes                  | -                             |
| diverged          | the training loss became NaN or inf                                    |
"""

from __future__ import annotations

from .spec.blocks import PhaseConfig

PHASES = ("comprehension", "grokking", "memorization", "confusion", "val_without_train", "diverged")
UNDECODABLE = "undecodable"  # counted apart: the split itself cannot reach the threshold on validation


def summary_metric(name: str, threshold: float) -> str:
    """The one rule for a crossing's summary name, STYLE.md's: step_val_acc_0.9, step_train_acc_0.95, step_rqi_0.95.
    Every reader and writer builds it here, so a spec at another threshold keeps its crossings everywhere."""
    return f"{name}_{threshold:g}"


def crossing_metrics(threshold: float) -> tuple[str, str]:
    """(train, val) crossing summary names at a threshold."""
    return summary_metric("step_train_acc", threshold), summary_metric("step_val_acc", threshold)


def _within(step: int | None, budget: int) -> bool:
    return step is not None and step <= budget


def classify(step_train: int | None, step_val: int | None, diverged: bool, cfg: PhaseConfig) -> str:
    """Phase of a finished (or stopped) trial from its crossing steps."""
    if diverged:
        return "diverged"
    train, val = _within(step_train, cfg.budget), _within(step_val, cfg.budget)
    if train and val:
        return "comprehension" if step_val - step_train < cfg.gap else "grokking"
    if train:
        return "memorization"
    if val:
        return "val_without_train"
    return "confusion"


def is_decided(step_train: int | None, step_val: int | None, diverged: bool, step: int, cfg: PhaseConfig) -> bool:
    """True once no later step can change the phase: both crossings seen, diverged, or budget spent."""
    return diverged or (step_train is not None and step_val is not None) or step >= cfg.budget


def counted_phase(phase: str, ideal_val_acc: float | None, threshold: float) -> str:
    """What a run counts as in phase counts. A split whose ideal val accuracy (Liu's Appendix E) is below the
    threshold cannot generalize whatever the model does, so its memorization or confusion says nothing about the
    model: it counts as undecodable, as the diagram draws it. Divergence is the model's own, so it stays."""
    if ideal_val_acc is not None and ideal_val_acc < threshold and phase != "diverged":
        return UNDECODABLE
    return phase


def ordered(counts) -> list[str]:
    """The phases present in counts, in the table's order (then any other label, such as undecodable, sorted)."""
    return [p for p in PHASES if p in counts] + sorted(p for p in counts if p not in PHASES)


def gap(step_train: int | None, step_val: int | None) -> int | None:
    return None if step_train is None or step_val is None else step_val - step_train
