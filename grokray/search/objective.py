"""De-grokking objectives, as pure functions of a trial's crossing steps (no Optuna, Ray or MLflow).

Both are minimised. A trial generalizes when train and val accuracy both reached the threshold within the
budget (phase comprehension or grokking). A trial that does not (memorization, confusion, val_without_train,
diverged, or one stopped early) scores `penalty`, which `config.parse_search` keeps above the budget, so it
ranks below every trial that generalizes:

- time_to_generalize = step(val >= threshold)
- grokking_gap       = step(val >= threshold) - step(train >= threshold)   (<= budget; may be negative)
"""

from __future__ import annotations

GENERALIZED = ("comprehension", "grokking")


def generalized(phase: str, step_train: int | None, step_val: int | None) -> bool:
    return phase in GENERALIZED and step_train is not None and step_val is not None


def time_to_generalize(phase: str, step_train: int | None, step_val: int | None, penalty: float) -> float:
    return float(step_val) if generalized(phase, step_train, step_val) else float(penalty)


def grokking_gap(phase: str, step_train: int | None, step_val: int | None, penalty: float) -> float:
    return float(step_val - step_train) if generalized(phase, step_train, step_val) else float(penalty)


OBJECTIVE_FNS = {"time_to_generalize": time_to_generalize, "grokking_gap": grokking_gap}


def objective_values(names: list[str], phase: str, step_train, step_val, penalty: float) -> list[float]:
    return [OBJECTIVE_FNS[n](phase, step_train, step_val, penalty) for n in names]


def report_metrics(objective: list[str], penalty: float, configs: list, results: list) -> dict:
    """What a search trial (a pack of one) adds to each report: val/acc now, and each objective as if the trial
    ended here (a trial that has not generalized yet scores the penalty; ASHA prunes on val/acc)."""
    (result,) = results
    out = {
        "val/acc": float(result.final.get("val/acc", 0.0)),
        "phase": result.phase,
        "step_train_acc": -1 if result.step_train is None else int(result.step_train),
        "step_val_acc": -1 if result.step_val is None else int(result.step_val),
        "trial_key": configs[0].key(),
    }
    for name, value in zip(objective, objective_values(objective, result.phase, result.step_train, result.step_val,
                                                       penalty), strict=True):
        out[name] = value
    return out
