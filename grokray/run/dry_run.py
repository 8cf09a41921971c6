"""The dry-run's estimate of a plan, one assembly for `grokray run --dry-run` and `grokray search --dry-run`: its
step costs measured on this machine, its budget use taken from the store's earlier runs of the spec, else from the
committed atlas page of this very spec (a library spec on a new store), else the prior."""

from __future__ import annotations

from ..plan.estimate import BudgetUse, estimate_plan, plan_budget
from ..tracking.history import atlas_budget_use, measured_budget_use
from ..tracking.uri import resolve_tracking_uri


def estimate(plan, spec_name: str, tracking_uri: str | None, calibrate: bool, spec_path=None, **kwargs):
    found = measured_budget_use(resolve_tracking_uri(tracking_uri), spec_name, plan_budget(plan))
    if found is None and spec_path is not None:
        found = atlas_budget_use(spec_path, plan.spec.hash(), plan_budget(plan))
    return estimate_plan(plan, calibrate_costs=calibrate, use=BudgetUse(*found) if found else None, **kwargs)
