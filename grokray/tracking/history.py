"""What earlier runs of an experiment say about the next one's cost: how much of their budget the members trained.

A member stops once its phase is decided; memorization and confusion are decided only by the budget, and a
grokking member only when its validation accuracy crosses, so a sweep's wall time hangs on how its members end,
which no calibration can measure. Without history the estimate assumes half of them train the whole budget and
the rest stop at once. With it, the estimate takes what the stored runs of the same experiment did at the budget
nearest the new sweep's: the share that trained the whole budget (a pack sheds members only once a quarter have
stopped) and the mean share of the budget trained. The critical-fraction study trained 84% of its members to
the budget at reduced scale (85% of the budget on average), the liu-fig6a grid 29% (30%), and Fig. 6d's 44%
(63%: its grokking members stop late). Reading never creates a store or an experiment.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

from .schema import STEPS_RUN_METRIC
from .uri import store_exists

MIN_RUNS = 8  # fewer classified runs at one budget say too little to replace the prior


@dataclass(frozen=True)
class BudgetShare:
    share: float  # of the classified runs at `budget`, those that trained all of it
    trained: float  # the mean share of `budget` they trained
    runs: int
    budget: int

    def describe(self, experiment: str) -> str:
        return f"measured on {self.runs} stored runs of {experiment!r} at budget {self.budget}"


def _budget(params: dict) -> int | None:
    try:
        steps = int(float(params["train.steps"]))
    except (KeyError, ValueError):
        return None
    budget = params.get("phases.budget")
    return min(steps, int(float(budget))) if budget not in (None, "None") else steps


def trained_fractions(tracker, experiment_name: str) -> dict[int, list[float]]:
    """budget -> the share of it each classified child run of a finished sweep trained (steps_run / budget)."""
    from .client import search_all
    from .queries import classified_query, parents_query
    from .records import RunStatus

    exp_id = tracker.experiment_id(experiment_name)
    if exp_id is None:
        return {}
    # only finished sweeps: one still running has classified its early stoppers and not yet the members that
    # train their whole budget, so its children would say the budget is cheap
    finished = {r.run_id for r in search_all(tracker, exp_id, parents_query(status=RunStatus.FINISHED))}
    used: dict[int, list[float]] = {}
    for run in search_all(tracker, exp_id, classified_query()):
        if run.parent_id not in finished:
            continue
        budget, steps = _budget(run.params), run.metrics.get(STEPS_RUN_METRIC)
        if budget and steps is not None:
            used.setdefault(budget, []).append(min(steps, budget) / budget)
    return used


def stored_budget_share(tracking_uri: str, experiment_name: str, budget: int) -> BudgetShare | None:
    """The share at the stored budget nearest `budget` (by ratio; the larger on a tie) among budgets with at
    least MIN_RUNS classified runs, or None (no store, no experiment, too few runs, or the store unreadable)."""
    if not store_exists(tracking_uri):
        return None  # nothing stored to measure, and MLflow's imports not paid for it
    from .trackers import open_tracker  # the tracker's imports: only once a store is there to read

    try:
        used = trained_fractions(open_tracker(tracking_uri), experiment_name)
    except Exception:  # noqa: BLE001 - an unreachable or foreign store leaves the estimate on its prior
        return None
    usable = {b: u for b, u in used.items() if len(u) >= MIN_RUNS}
    if not usable or budget <= 0:
        return None
    nearest = min(usable, key=lambda b: (abs(math.log(b / budget)), -b))
    return BudgetShare(*share_and_mean(usable[nearest]), len(usable[nearest]), nearest)


def share_and_mean(fractions) -> tuple[float, float]:
    """(the share that trained the whole budget, the mean share trained) of per-member fractions of a budget."""
    fractions = list(fractions)
    return sum(f >= 1 for f in fractions) / len(fractions), sum(fractions) / len(fractions)


def measured_budget_use(tracking_uri: str | None, experiment_name: str, budget: int) -> tuple[float, float, str] | None:
    """(share trained to the end, mean share trained, where they come from) for the cost estimate, or None."""
    found = stored_budget_share(tracking_uri, experiment_name, budget) if tracking_uri else None
    return None if found is None else (found.share, found.trained, found.describe(experiment_name))


def atlas_budget_use(spec_path: str | Path, spec_hash: str, budget: int) -> tuple[float, float, str] | None:
    """Budget use measured on the committed atlas page of this very configuration set, for a store that holds no
    runs of it yet (a new user's first dry-run of a library spec): the page's json names each piece's spec hash,
    its data CSV holds every run's steps_run (docs/atlas/<spec stem>-<scale>.{json,csv} beside sweeps/)."""
    spec_path = Path(spec_path).resolve()
    atlas = spec_path.parent.parent / "docs" / "atlas"
    for meta in sorted(atlas.glob(f"{spec_path.stem}-*.json")):
        pieces = {name for name, h in json.loads(meta.read_text()).get("pieces", {}).items() if h == spec_hash}
        data = atlas / "data" / f"{meta.stem}.csv"
        if not pieces or not data.exists() or budget <= 0:
            continue
        with data.open() as f:
            fractions = [min(float(r["steps_run"]), budget) / budget for r in csv.DictReader(f)
                         if r.get("piece") in pieces and r.get("steps_run") not in (None, "")]
        if len(fractions) >= MIN_RUNS:
            share, trained = share_and_mean(fractions)
            return share, trained, f"measured on the {len(fractions)} runs of this spec's docs/atlas/{meta.stem}.md"
    return None

