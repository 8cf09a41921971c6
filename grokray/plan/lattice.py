"""The spec's `adaptive:` block: two swept axes laid on a target lattice, the start grid, the trial budget.

Pure: validated before anything runs (SpecError naming the field); the refinement itself is in plan.refine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import SpecError
from ..spec.blocks import coerce, parse_dataclass
from ..spec.build import Spec

Index = tuple[int, int]
Trial = tuple[int, int, int]  # (i, j, seed)


# -- the adaptive: block ---------------------------------------------------------------------------------------
@dataclass
class RefineRules:
    """Which cells to split. disagreement: minority share of a corner's seeds above which it is uncertain
    (None: off). extra_seeds: seeds added once to every uncertain point."""

    boundary: bool = True
    disagreement: float | None = 0.25
    extra_seeds: list[int] = field(default_factory=list)

    def validate(self, path):
        if self.disagreement is not None and not 0.0 <= self.disagreement < 1.0:
            raise SpecError(f"{path}.disagreement", f"got {self.disagreement}; must be in [0, 1) or null")


@dataclass
class AdaptiveConfig:
    axes: list[str] = field(default_factory=list)  # default: the first two sweep axes
    start: list[int] = field(default_factory=lambda: [5, 5])
    target: list[int] = field(default_factory=lambda: [17, 17])
    budget: int | None = None  # max trials (configurations x seeds); None: the full target grid
    refine: dict = field(default_factory=dict)


ADAPTIVE_KEYS = ("axes", "start", "target", "budget", "refine")


@dataclass(frozen=True)
class AxisLattice:
    """One axis of the target lattice: `target` points from lo to hi, evenly spaced in the axis's own scale."""

    key: str
    lo: float
    hi: float
    log: bool
    start: int
    target: int

    @property
    def coarse_step(self) -> int:
        return (self.target - 1) // (self.start - 1)

    def values(self) -> list[float]:
        if self.log:
            return [float(v) for v in 10 ** np.linspace(math.log10(self.lo), math.log10(self.hi), self.target)]
        return [float(v) for v in np.linspace(self.lo, self.hi, self.target)]

    def value(self, i: int) -> float:
        return self.values()[i]

    def coarse(self) -> list[int]:
        return list(range(0, self.target, self.coarse_step))


@dataclass(frozen=True)
class Lattice:
    x: AxisLattice
    y: AxisLattice

    @property
    def shape(self) -> tuple[int, int]:
        return self.x.target, self.y.target

    def point(self, i: int, j: int) -> dict:
        return {self.x.key: self.x.value(i), self.y.key: self.y.value(j)}

    def coarse_points(self) -> list[Index]:
        return [(i, j) for i in self.x.coarse() for j in self.y.coarse()]

    def coarse_cells(self) -> list[tuple[int, int, int, int]]:
        xs, ys = self.x.coarse(), self.y.coarse()
        return [(a, b, c, d) for a, b in zip(xs, xs[1:], strict=False) for c, d in zip(ys, ys[1:], strict=False)]


@dataclass(frozen=True)
class AdaptivePlan:
    lattice: Lattice
    rules: RefineRules
    budget: int
    seeds: tuple[int, ...]

    @property
    def full_grid_trials(self) -> int:
        return self.lattice.x.target * self.lattice.y.target * len(self.seeds)


def _pair(raw, path, kind=int) -> list:
    value = coerce(list[kind], raw if isinstance(raw, list) else [raw, raw], path)
    if len(value) != 2:
        raise SpecError(path, f"expected two numbers (x, y), got {raw!r}")
    return value


def parse_adaptive(spec: Spec, raw: dict | None = None) -> AdaptivePlan:
    """The spec's `adaptive:` block (or `raw`, e.g. {} for `--adaptive` on a spec without one), validated."""
    raw = spec.raw.get("adaptive") if raw is None else raw
    raw = {} if raw is None or raw is True else raw
    if not isinstance(raw, dict):
        raise SpecError("adaptive", f"expected a mapping with keys {', '.join(ADAPTIVE_KEYS)}, got {raw!r}")
    cfg = parse_dataclass(AdaptiveConfig, {k: v for k, v in raw.items() if k != "refine"}, "adaptive")
    rules = parse_dataclass(RefineRules, raw.get("refine"), "adaptive.refine")
    swept = [k for k, v in spec.axes.items()]
    axes = cfg.axes or swept[:2]
    if len(axes) != 2 or axes[0] == axes[1]:
        raise SpecError("adaptive.axes", f"expected two different sweep axes [x, y], got {axes!r}; "
                        f"sweep axes: {', '.join(swept) or 'none'}")
    for a in axes:
        if a not in spec.axes:
            raise SpecError("adaptive.axes", f"{a!r} is not a sweep axis; sweep axes: {', '.join(swept) or 'none'}")
    others = [k for k, v in spec.axes.items() if k not in axes and len(v) > 1]
    if others:
        raise SpecError("adaptive.axes", f"the other sweep axes must have one value; {', '.join(others)} vary")
    start, target = _pair(cfg.start, "adaptive.start"), _pair(cfg.target, "adaptive.target")
    lattices = []
    for n, (key, s, t) in enumerate(zip(axes, start, target, strict=True)):
        which = "xy"[n]
        if s < 2:
            raise SpecError(f"adaptive.start[{n}]", f"got {s}; need at least 2 points on {which} ({key})")
        ratio = (t - 1) / (s - 1)
        if t < s or ratio != int(ratio) or int(ratio) & (int(ratio) - 1):
            allowed = ", ".join(str(2**k * (s - 1) + 1) for k in range(5))
            raise SpecError(f"adaptive.target[{n}]", f"got {t}; must be 2^k*(start-1)+1 so midpoints are lattice "
                            f"points; with start {s}: {allowed}, ...")
        try:
            vals = [float(v) for v in spec.axes[key]]
        except (TypeError, ValueError):
            raise SpecError(f"sweep.{key}", "an adaptive axis must be numeric") from None
        lo, hi = min(vals), max(vals)
        if lo == hi:
            raise SpecError(f"sweep.{key}", f"an adaptive axis needs a range; all values are {lo:g}")
        log = key in spec.log_axes
        lattices.append(AxisLattice(key, lo, hi, log, s, t))
    lattice = Lattice(*lattices)
    seeds = tuple(spec.seeds)
    full = lattice.x.target * lattice.y.target * len(seeds)
    budget = full if cfg.budget is None else cfg.budget
    first = len(lattice.coarse_points()) * len(seeds)
    if budget < first:
        raise SpecError("adaptive.budget", f"got {budget}; the start grid alone needs {first} trials")
    for s in rules.extra_seeds:
        if s in seeds:
            raise SpecError("adaptive.refine.extra_seeds", f"seed {s} is already one of the spec's seeds {list(seeds)}")
    return AdaptivePlan(lattice, rules, int(budget), seeds)


def trial_point(plan: AdaptivePlan, t: Trial) -> dict:
    """The sweep point of lattice trial (i, j, seed)."""
    i, j, seed = t
    return {**plan.lattice.point(i, j), "seed": seed}


def trial_keys(spec: Spec, plan: AdaptivePlan, trials) -> dict[str, Trial]:
    """Trial key -> (i, j, seed): how a stored run is placed back on the lattice."""
    return {spec.trial(trial_point(plan, t)).key(): t for t in trials}


class PointSpec(Spec):
    """A Spec whose points() is an explicit list, so `expand` packs exactly one round's configurations."""

    def __init__(self, spec: Spec, points: list[dict]):
        super().__init__(**{f: getattr(spec, f) for f in spec.__dataclass_fields__})
        self._points = points

    def points(self) -> list[dict]:
        return [dict(p) for p in self._points]

    def point_count(self) -> int:
        return len(self._points)

    def point(self, index: int) -> dict:
        return dict(self._points[index])
