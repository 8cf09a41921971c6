"""What earlier runs of an experiment say about the next one's cost: the share of members that trained to their
budget.

A member stops once its phase is decided; memorization and confusion are decided only by the budget, so a
sweep's wall time hangs on how many members end that way, which no calibration can measure. Without history
the estimate assumes half. With it, the estimate takes the share measured on the stored runs of the same
experiment, at the budget nearest the new sweep's: the critical-fraction study trained 84% of its members to
the budget at reduced scale, and the liu-fig6a grid 29%. Reading never creates a store or an experiment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .delivery import server_answers
from .mlflow_runs import PHASE_TAG, search_all

MIN_RUNS = 8  # fewer classified runs at one budget say too little to replace the prior


@dataclass(frozen=True)
class BudgetShare:
    share: float  # of the classified runs at `budget`, those that trained all of it
    runs: int
    budget: int

    def describe(self, experiment: str) -> str:
        return f"measured on {self.runs} stored runs of {experiment!r} at budget {self.budget}"


def _store_exists(uri: str) -> bool:
    if uri.startswith("sqlite:///"):
        path = uri[len("sqlite:///"):]
        return path != ":memory:" and Path(path).is_file()
    if "://" not in uri or uri.startswith("file:"):
        return Path(uri.removeprefix("file://")).is_dir()
    if uri.startswith("http"):
        return server_answers(uri)  # a dry-run must not hang on a server that is down
    return True


def _budget(params: dict) -> int | None:
    try:
        steps = int(float(params["train.steps"]))
    except (KeyError, ValueError):
        return None
    budget = params.get("phases.budget")
    return min(steps, int(float(budget))) if budget not in (None, "None") else steps


def budget_shares(client, experiment_name: str) -> dict[int, tuple[int, int]]:
    """budget -> (classified runs, runs whose steps_run reached it) over the experiment's child runs."""
    exp = client.get_experiment_by_name(experiment_name)
    if exp is None:
        return {}
    counts: dict[int, list[int]] = {}
    for run in search_all(client, exp.experiment_id, f"tags.`{PHASE_TAG}` LIKE '%'"):
        budget, steps = _budget(run.data.params), run.data.metrics.get("steps_run")
        if budget is None or steps is None:
            continue
        c = counts.setdefault(budget, [0, 0])
        c[0] += 1
        c[1] += steps >= budget
    return {b: (n, long) for b, (n, long) in counts.items()}


def stored_budget_share(tracking_uri: str, experiment_name: str, budget: int) -> BudgetShare | None:
    """The share at the stored budget nearest `budget` (by ratio; the larger on a tie) among budgets with at
    least MIN_RUNS classified runs, or None (no store, no experiment, too few runs, or the store unreadable)."""
    if not _store_exists(tracking_uri):
        return None
    from mlflow.tracking import MlflowClient

    try:
        shares = budget_shares(MlflowClient(tracking_uri), experiment_name)
    except Exception:  # noqa: BLE001 - an unreachable or foreign store leaves the estimate on its prior
        return None
    usable = {b: c for b, c in shares.items() if c[0] >= MIN_RUNS and b > 0}
    if not usable or budget <= 0:
        return None
    nearest = min(usable, key=lambda b: (abs(math.log(b / budget)), -b))
    n, long = usable[nearest]
    return BudgetShare(long / n, n, nearest)
