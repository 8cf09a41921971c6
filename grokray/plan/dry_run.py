"""The dry-run's estimate of a plan, one assembly for `grokray run --dry-run` and `grokray search --dry-run`: its
step costs measured on this machine, its budget use taken from the store's earlier runs of the spec, else from the
committed atlas page of this very spec (a library spec on a new store), else the prior."""

from __future__ import annotations

import math

from ..tracking.history import atlas_budget_use, measured_budget_use
from ..tracking.uri import resolve_tracking_uri
from .estimate import SWEEP_S, BudgetUse, estimate_plan, fmt_minutes, plan_budget
from .expand import expand
from .lattice import PointSpec, trial_point
from .refine import next_points

ROUND_S = 3.0  # an adaptive round's own Tune run: started, its state saved, its round record written


def estimate(plan, spec_name: str, tracking_uri: str | None, calibrate: bool, spec_path=None, **kwargs):
    found = measured_budget_use(resolve_tracking_uri(tracking_uri), spec_name, plan_budget(plan))
    if found is None and spec_path is not None:
        found = atlas_budget_use(spec_path, plan.spec.hash(), plan_budget(plan))
    return estimate_plan(plan, calibrate_costs=calibrate, use=BudgetUse(*found) if found else None, **kwargs)


def adaptive_lines(spec, plan, tracking_uri: str | None, calibrate: bool, spec_path=None) -> list[str]:
    """`grokray run --adaptive --dry-run`: the lattice, round 0 with its cost estimate, and the budget with the
    cost it would reach if every configuration it allows trained its whole budget, in the most rounds the lattice
    allows (later rounds' sizes depend on what round 0 finds, so that is an upper bound, not a forecast)."""
    x, y = plan.lattice.x, plan.lattice.y
    first = next_points(plan, {}).trials
    est = estimate(expand(PointSpec(spec, [trial_point(plan, t) for t in first])), spec.name, tracking_uri,
                   calibrate, spec_path)
    rounds = most_rounds(plan)
    upper = adaptive_upper_s(est, len(first), plan.budget, rounds)
    return [f"adaptive:       {x.key} x {y.key}, start {x.start}x{y.start}, target {x.target}x{y.target}",
            f"round 0:        {len(first)} configurations, estimate {fmt_minutes(est.seconds)}",
            f"budget:         {plan.budget} of {plan.full_grid_trials} (the full target grid); all {plan.budget} "
            f"in the most rounds the lattice allows ({rounds}) would take at most {fmt_minutes(upper)} at round 0's "
            "costs, each training its whole budget (the rounds stop where the diagram is settled)",
            *(line for line in est.lines() if line.startswith(("step costs:", "budget use:")))]


def most_rounds(plan) -> int:
    """Rounds an adaptive sweep can take: the start grid, one per halving of the spacing on each axis (a boundary
    cell is split along one axis at a time), and one for extra seeds."""
    def halvings(axis) -> int:
        return max(0, math.ceil(math.log2((axis.target - 1) / max(1, axis.start - 1))))

    extra = 1 if plan.rules.extra_seeds else 0
    return min(plan.budget, 1 + halvings(plan.lattice.x) + halvings(plan.lattice.y) + extra)


def adaptive_upper_s(est, first: int, budget: int, rounds: int) -> float:
    """Ray and the parent once, each round's Tune run and pack starts as round 0's, and every configuration at
    round 0's upper cost per configuration (it used round 0's expected cost and no round's fixed costs: 27 s
    printed against 59 s measured)."""
    per_round = ROUND_S + (est.fixed_seconds - SWEEP_S)
    return SWEEP_S + rounds * per_round + (est.upper_seconds - est.fixed_seconds) / max(1, first) * budget
