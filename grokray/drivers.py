"""Each driver's implementation, by kind: how it launches a spec and what it plans (the atlas's dry-run estimate).
What a driver declares (its command, its close's figures, the spec block that asks for it) is
tracking/schema.DRIVERS, below the launch layer that reads it; this maps the same kinds to the driver modules,
above them all, and refuses to import if the two lists differ."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .plan.expand import expand
from .run.adaptive import run_adaptive
from .run.grid import run_sweep
from .search.config import parse_search, search_plan
from .search.launch.driver import run_search
from .tracking.schema import DRIVERS as DECLARED


@dataclass(frozen=True)
class Driver:
    launch: Callable  # (spec, LaunchOptions) -> LaunchSummary
    plan: Callable  # spec -> (its plan, the most trials it runs at once, or None: as many as the cluster holds)


def _grid_plan(spec):
    return expand(spec), None


def _study_plan(spec):
    cfg = parse_search(spec)  # n_trials one-configuration trials, max_concurrent at once
    return search_plan(spec, cfg.n_trials), cfg.max_concurrent


DRIVERS = {"grid": Driver(run_sweep, _grid_plan), "adaptive": Driver(run_adaptive, _grid_plan),
           "search": Driver(run_search, _study_plan)}
if set(DRIVERS) != set(DECLARED):
    raise ImportError(f"drivers implemented {sorted(DRIVERS)} and declared {sorted(DECLARED)} differ")
