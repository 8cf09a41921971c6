"""The dry-run's estimate of a plan, one assembly for `grokray run --dry-run` and `grokray search --dry-run`: its
step costs measured on this machine, its budget use taken from the store's earlier runs of the spec, else from the
committed atlas page of this very spec (a library spec on a new store), else the prior."""

from __future__ import annotations

from ..tracking.history import atlas_budget_use, measured_budget_use
from ..tracking.uri import resolve_tracking_uri
from .estimate import BudgetUse, estimate_plan, fmt_minutes, plan_budget
from .expand import expand
from .lattice import PointSpec, trial_point
from .refine import next_points


def estimate(plan, spec_name: str, tracking_uri: str | None, calibrate: bool, spec_path=None, **kwargs):
    found = measured_budget_use(resolve_tracking_uri(tracking_uri), spec_name, plan_budget(plan))
    if found is None and spec_path is not None:
        found = atlas_budget_use(spec_path, plan.spec.hash(), plan_budget(plan))
    return estimate_plan(plan, calibrate_costs=calibrate, use=BudgetUse(*found) if found else None, **kwargs)


def adaptive_lines(spec, plan, tracking_uri: str | None, calibrate: bool, spec_path=None) -> list[str]:
    """`grokray run --adaptive --dry-run`: the lattice, round 0 with its cost estimate, and the budget with the
    cost it would reach if every configuration it allows trained (later rounds' sizes depend on what round 0
    finds, so that is an upper bound, not a forecast)."""
    x, y = plan.lattice.x, plan.lattice.y
    first = next_points(plan, {}).trials
    est = estimate(expand(PointSpec(spec, [trial_point(plan, t) for t in first])), spec.name, tracking_uri,
                   calibrate, spec_path)
    per_config = (est.seconds - est.fixed_seconds) / max(1, len(first))
    return [f"adaptive:       {x.key} x {y.key}, start {x.start}x{y.start}, target {x.target}x{y.target}",
            f"round 0:        {len(first)} configurations, estimate {fmt_minutes(est.seconds)}",
            f"budget:         {plan.budget} of {plan.full_grid_trials} (the full target grid); at round 0's cost per "
            f"configuration, all {plan.budget} would take about {fmt_minutes(per_config * plan.budget)} (an upper "
            "bound: the rounds stop where the diagram is settled)",
            *(line for line in est.lines() if line.startswith(("step costs:", "budget use:")))]
