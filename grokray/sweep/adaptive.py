"""Adaptive phase diagrams: spend trials where the phase changes.

Two swept axes are laid on a *target lattice* of `2^k·(start−1)+1` points per axis, evenly spaced in each axis's
own scale (log10 for log axes), so every midpoint of a coarse cell is a lattice point. Round 0 samples the coarse
`start` grid. Each later round asks the pure function `next_points` which lattice points to train next:

- the sampled points form a tree of *cells* (rectangles whose four corners are sampled). A leaf cell is split
  when its corners' majority phases differ (`refine.boundary`) or a corner's seeds disagree beyond
  `refine.disagreement` (minority share > threshold). A boundary that crosses the cell from one edge to the
  opposite edge is located along that axis only (the two edge midpoints); otherwise the edge midpoints and
  the centre are added. Splitting along one axis costs 2 trials instead of 5, which is what lets a 40% budget
  trace every boundary of the quickstart diagram;
- a point whose seeds disagree gets `refine.extra_seeds` once;
- cells are taken in priority order (boundaries, then extra seeds, then seed disagreement; coarser cells first,
  then cells with more distinct corner phases, then those needing fewer new points)
  while they fit the trial `budget`; nothing is proposed once every leaf is uniform or at the target resolution.

`next_points` is a function of the observations only (no hidden state): the cell structure is re-derived from
which points are present, so a resumed sweep and a benchmark replaying stored phases get the same proposals.

Scheduling: rounds of ordinary packed Tune runs, not a Tune `Searcher`. A round's points are expanded and packed
by `sweep.expand` (same pack signature, same auto pack size) and run by a `tune.Tuner` over `train_pack`, exactly
like `grokray run`; every configuration is a child run of one MLflow parent. A Searcher proposes one trial at a
time from individual results, which would put one configuration in each Tune trial and lose packing (the main
cost saving on both CPU and GPU), and its state would live in Tune's experiment checkpoint rather than MLflow.
Refinement also needs a whole round (all neighbours of a cell) before deciding, which rounds give for free.
The price is a barrier per round (a few rounds: log2 of target/start per axis plus extra-seed rounds).

Resume: before a round starts its points are written on the parent run (artifact `adaptive/round-NN.json`) and
the round's Tune experiment path is tagged. `--resume` reads the finished child runs (phase tag, by trial key)
and the last round file, restores that round's Tune experiment (finished packs are not re-run, running ones
continue from their checkpoints) or, when none was written yet, trains only the round's unfinished points, then
carries on. No finished configuration is trained twice.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..config import coerce, parse_dataclass
from ..errors import SpecError
from ..phases import PHASES
from ..spec import Spec

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


# -- refinement: a pure function of the observations -------------------------------------------------------------
def majority(phases: Sequence[str]) -> str:
    """Most frequent phase; ties go to the earlier phase in PHASES (as analysis.phase_grid does)."""
    counts: dict[str, int] = {}
    for p in phases:
        counts[p] = counts.get(p, 0) + 1
    order = {p: k for k, p in enumerate(PHASES)}
    return min(counts, key=lambda p: (-counts[p], order.get(p, len(order)), p))


def disagreement(phases: Sequence[str]) -> float:
    """Share of seeds not in the majority phase (0 for one seed)."""
    if not phases:
        return 0.0
    m = majority(phases)
    return sum(p != m for p in phases) / len(phases)


class Cell(NamedTuple):
    i0: int
    i1: int
    j0: int
    j1: int

    @property
    def corners(self) -> list[Index]:
        return [(self.i0, self.j0), (self.i1, self.j0), (self.i0, self.j1), (self.i1, self.j1)]

    def split(self, axes: str = "ij") -> tuple[list[Index], list[Cell]]:
        """(new points, children) of a split along `axes` ("ij", "i" or "j"). A side of length 1 is at the target
        resolution and is not split."""
        i0, i1, j0, j1 = self
        si, sj = "i" in axes and i1 - i0 > 1, "j" in axes and j1 - j0 > 1
        im, jm = (i0 + i1) // 2, (j0 + j1) // 2
        if si and sj:
            pts = [(im, j0), (im, j1), (i0, jm), (i1, jm), (im, jm)]
            kids = [Cell(i0, im, j0, jm), Cell(im, i1, j0, jm), Cell(i0, im, jm, j1), Cell(im, i1, jm, j1)]
        elif si:
            pts, kids = [(im, j0), (im, j1)], [Cell(i0, im, j0, j1), Cell(im, i1, j0, j1)]
        elif sj:
            pts, kids = [(i0, jm), (i1, jm)], [Cell(i0, i1, j0, jm), Cell(i0, i1, jm, j1)]
        else:
            pts, kids = [], []
        return pts, kids


def split_axes(majors: Sequence[str]) -> str:
    """Where a boundary cell is split, from its corners' majority phases (i0j0, i1j0, i0j1, i1j1): a boundary
    that crosses the cell from one edge to the opposite one only needs locating along one axis (two new
    points instead of five); anything else (a corner region, three phases) is split both ways."""
    a, b, c, d = majors
    if a == c and b == d:
        return "i"
    if a == b and c == d:
        return "j"
    return "ij"


class Refinement(NamedTuple):
    """trials: (i, j, seed) to train next, in priority order; cells: (cell, reason) split this round, reason
    'boundary' or 'disagreement'; extra: (i, j) points given extra seeds; skipped: candidates left out by the
    budget; leaves: the current leaf cells (for inspection)."""

    trials: list[Trial]
    cells: list[tuple[Cell, str]]
    extra: list[Index]
    skipped: int
    leaves: list[Cell]


def leaf_cells(lattice: Lattice, present: set[Index]) -> list[Cell]:
    """The tree's leaves: a cell counts as split (both ways, else along i, else along j) when all the points of
    that split are present."""
    out, stack = [], [Cell(*c) for c in lattice.coarse_cells()]
    while stack:
        cell = stack.pop()
        for axes in ("ij", "i", "j"):
            pts, kids = cell.split(axes)
            if kids and all(p in present for p in pts):
                stack.extend(kids)
                break
        else:
            out.append(cell)
    return sorted(out)


def next_points(plan: AdaptivePlan, observed: Mapping[Index, Mapping[int, str]]) -> Refinement:
    """The next round: which (i, j, seed) to train given `observed` {(i, j): {seed: phase}} so far.

    Pure: the same observations always give the same answer; nothing is proposed that is already observed, the
    total (observed + proposed) never exceeds plan.budget, and only points of cells next to a boundary or an
    uncertain corner (plus missing start-grid points and extra seeds of uncertain points) are proposed."""
    lattice, rules, seeds = plan.lattice, plan.rules, plan.seeds
    observed = {tuple(k): dict(v) for k, v in observed.items() if v}
    present = set(observed)
    used = sum(len(v) for v in observed.values())
    remaining = plan.budget - used
    chosen: list[Trial] = []
    chosen_set: set[Trial] = set()

    def missing_base(p: Index) -> list[Trial]:
        have = observed.get(p, {})
        return [(p[0], p[1], s) for s in seeds if s not in have and (p[0], p[1], s) not in chosen_set]

    def take(trials: list[Trial]) -> bool:
        nonlocal remaining
        if len(trials) > remaining:
            return False
        for t in trials:
            chosen.append(t)
            chosen_set.add(t)
        remaining -= len(trials)
        return True

    skipped = 0
    # rank 0: the start grid, and base seeds missing at any present point (an interrupted round)
    for p in [*lattice.coarse_points(), *sorted(present)]:
        if not take(missing_base(p)):
            skipped += 1
    if any(p not in present for p in lattice.coarse_points()):  # the start grid first, on its own
        return Refinement(chosen, [], [], skipped, [])

    def phases(p: Index) -> list[str]:
        return [observed[p][s] for s in sorted(observed[p])]

    def uncertain(p: Index) -> bool:
        return rules.disagreement is not None and disagreement(phases(p)) > rules.disagreement

    leaves = leaf_cells(lattice, present)
    # (rank, -area, (-distinct phases, new points, cell), reason, split points): boundaries (1), extra seeds (2),
    # disagreement (3); coarser cells first, then cells with more phases at their corners, then the cheapest
    candidates = []
    for cell in leaves:
        pts, kids = cell.split()
        if not kids:
            continue
        if any(c not in present for c in cell.corners):
            continue  # cannot happen for sets this function built; ignore rather than guess
        majors = [majority(phases(c)) for c in cell.corners]
        area = (cell.i1 - cell.i0) * (cell.j1 - cell.j0)
        if rules.boundary and len(set(majors)) > 1:
            # along the axis the boundary crosses; once that is at the target resolution, along the other
            pts = cell.split(split_axes(majors))[0] or pts
            new = sum(q not in present for q in pts)
            candidates.append((1, -area, (-len(set(majors)), new, cell), "boundary", pts))
        elif any(uncertain(c) for c in cell.corners):
            candidates.append((3, -area, (0, sum(q not in present for q in pts), cell), "disagreement", pts))
    if rules.extra_seeds:
        for p in sorted(present):
            if uncertain(p) and any(s not in observed[p] for s in rules.extra_seeds):
                candidates.append((2, 0, (0, 0, Cell(p[0], p[0], p[1], p[1])), "extra", [p]))
    ranks = [(r, key[-1], reason, pts) for r, _, key, reason, pts in sorted(candidates, key=lambda c: c[:3])]
    cells, extra = [], []
    for _, cell, reason, pts in ranks:
        if reason == "extra":
            p = pts[0]
            trials = [(p[0], p[1], s) for s in rules.extra_seeds
                      if s not in observed[p] and (p[0], p[1], s) not in chosen_set]
            if take(trials):
                extra.append(p)
            else:
                skipped += 1
            continue
        trials = [t for q in pts if q not in present for t in missing_base(q)]
        if take(trials):
            cells.append((cell, reason))
        else:
            skipped += 1
    return Refinement(chosen, cells, extra, skipped, leaves)


def fill(plan: AdaptivePlan, observed: Mapping[Index, Mapping[int, str]]) -> np.ndarray:
    """Majority phase on the whole target lattice, shape (nx, ny): each lattice point takes the phase of the
    nearest observed point (in lattice units, i.e. the axes' own scales); ties go to the lower index."""
    nx, ny = plan.lattice.shape
    pts = sorted(p for p, v in observed.items() if v)
    if not pts:
        raise ValueError("nothing observed")
    arr = np.array(pts, dtype=float)
    labels = [majority([v for _, v in sorted(observed[p].items())]) for p in pts]
    gi, gj = np.meshgrid(np.arange(nx), np.arange(ny), indexing="ij")
    d = (gi[..., None] - arr[:, 0]) ** 2 + (gj[..., None] - arr[:, 1]) ** 2
    nearest = np.argmin(d, axis=-1)
    return np.array(labels, dtype=object)[nearest]


# -- the driver: rounds of packed Tune runs under one MLflow parent --------------------------------------------
ROUND_ARTIFACT_DIR = "adaptive"
ADAPTIVE_TAG = "grokray.adaptive"


class PointSpec(Spec):
    """A Spec whose points() is an explicit list, so `expand` packs exactly one round's configurations."""

    def __init__(self, spec: Spec, points: list[dict]):
        super().__init__(**{f: getattr(spec, f) for f in spec.__dataclass_fields__})
        self._points = points

    def points(self) -> list[dict]:
        return [dict(p) for p in self._points]


def trial_point(plan: AdaptivePlan, t: Trial) -> dict:
    i, j, seed = t
    return {**plan.lattice.point(i, j), "seed": seed}


@dataclass
class AdaptiveSummary:
    name: str
    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    rounds: int
    trials: int  # configurations trained under the parent (all rounds)
    budget: int
    full_grid: int
    phase_counts: dict[str, int]
    errored_trials: int
    interrupted: bool
    wall_s: float
    rounds_log: list[dict] = field(default_factory=list)


def _observed_from_runs(plan: AdaptivePlan, key_of: dict[str, Trial], runs) -> dict[Index, dict[int, str]]:
    obs: dict[Index, dict[int, str]] = {}
    for r in runs:
        t = key_of.get(r.data.tags.get("grokray.trial_key"))
        phase = r.data.tags.get("grokray.phase")
        if t is not None and phase:
            obs.setdefault((t[0], t[1]), {})[t[2]] = phase
    return obs


def _keys_for(spec: Spec, plan: AdaptivePlan, trials) -> dict[str, Trial]:
    return {spec.trial(trial_point(plan, t)).key(): t for t in trials}


def run_adaptive(spec: Spec, options=None, *, max_rounds: int | None = None) -> AdaptiveSummary:
    """Run (or with options.resume continue) the adaptive sweep of `spec` on Ray Tune + MLflow.

    max_rounds: stop after this many rounds in this call (the parent is left KILLED, as after Ctrl-C; --resume
    continues). Used by tests to interrupt at a known place."""
    import ray
    import yaml
    from mlflow.entities import Metric
    from ray import tune

    from ..tracking import SweepTracker, phase_counts, resolve_tracking_uri
    from ..tracking.mlflow_runs import _now_ms, _retry, clean, code_version, log_metrics
    from . import runner
    from .expand import expand
    from .trainable import train_pack

    options = options or runner.SweepOptions()
    plan = parse_adaptive(spec)
    spec.trial(trial_point(plan, (0, 0, plan.seeds[0])))  # the base parses; every lattice point below too
    t_start = time.time()
    import os

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    runner.check_gpu_request(spec, options)
    started_ray = runner.start_ray(options, spec)
    try:
        runner.check_cluster_gpus(spec)
        gpu_free = runner.gpu_free_bytes(spec)
        uri = resolve_tracking_uri(options.tracking_uri)
        tracker = SweepTracker(uri, spec.name)
        client = tracker.client
        storage = runner.resolve_storage(options.storage)
        trainable = tune.with_resources(train_pack, {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu})
        slots = runner._slots(spec)
        swept = [plan.lattice.x.key, plan.lattice.y.key] + (["seed"] if len(plan.seeds) > 1
                                                              or plan.rules.extra_seeds else [])
        log_axes = sorted(a.key for a in (plan.lattice.x, plan.lattice.y) if a.log)
        rounds_log: list[dict] = []
        known: dict[str, Trial] = {}  # trial key -> (i, j, seed), for every trial proposed so far

        if options.resume:
            parent = tracker.find_parent(spec.hash())
            if parent is None or parent.data.tags.get(ADAPTIVE_TAG) != "true":
                raise SpecError("--resume", f"no interrupted adaptive sweep of spec {spec.name!r} "
                                f"(hash {spec.hash()}) found in {uri}; run without --resume")
            tracker.reopen(parent.info.run_id)
            files = sorted(a.path for a in client.list_artifacts(parent.info.run_id, ROUND_ARTIFACT_DIR))
            for path in files:
                local = client.download_artifacts(parent.info.run_id, path)
                with open(local) as fh:
                    rounds_log.append(json.load(fh))
            for rnd in rounds_log:
                known.update(_keys_for(spec, plan, [tuple(t) for t in rnd["trials"]]))
        else:
            tags = {
                "grokray.role": "parent", "grokray.spec_hash": spec.hash(), "grokray.code_version": code_version(),
                "grokray.swept": swept, "grokray.log_axes": log_axes, ADAPTIVE_TAG: "true",
                "grokray.adaptive.budget": plan.budget, "grokray.adaptive.full_grid": plan.full_grid_trials,
                "grokray.adaptive.lattice": [plan.lattice.x.target, plan.lattice.y.target],
            }
            run = client.create_run(tracker.experiment_id, run_name=f"{spec.name} adaptive", tags=clean(tags))
            tracker.parent_run_id = run.info.run_id
            client.log_text(run.info.run_id, yaml.safe_dump(spec.raw, sort_keys=False), "spec.resolved.yaml")
        parent_id = tracker.parent_run_id
        ctx = {
            "tracking_uri": uri, "experiment_id": tracker.experiment_id, "parent_run_id": parent_id,
            "spec_hash": spec.hash(), "code_version": client.get_run(parent_id).data.tags["grokray.code_version"],
            "swept": swept, "log_axes": log_axes, "checkpoint_every": options.checkpoint_every,
            "min_report_s": options.min_report_s, "cpu": spec.resources.cpu, "gpu": spec.resources.gpu,
            "final_state": spec.artifacts.final_state,
        }

        def observed_now():
            return _observed_from_runs(plan, known, tracker.children())

        errored, interrupted, ran_rounds = 0, False, 0
        pending_round = None
        if rounds_log:  # resume: finish the last recorded round first
            last = rounds_log[-1]
            obs = observed_now()
            todo = [tuple(t) for t in last["trials"] if t[2] not in obs.get((t[0], t[1]), {})]
            if todo:
                pending_round = (last["round"], todo, last.get("experiment_path"))
        while True:
            if pending_round is not None:
                rnd, trials, restore_path = pending_round
                pending_round = None
            else:
                if max_rounds is not None and ran_rounds >= max_rounds:
                    interrupted = True
                    break
                obs = observed_now()
                ref = next_points(plan, obs)
                if not ref.trials:
                    break
                rnd, trials, restore_path = len(rounds_log), ref.trials, None
                name = f"{spec.name}_adaptive_{time.strftime('%Y%m%d-%H%M%S')}_r{rnd:02d}"
                record = {"round": rnd, "trials": [list(t) for t in trials], "experiment_path":
                          f"{storage.rstrip('/')}/{name}", "name": name,
                          "cells": [[list(c), why] for c, why in ref.cells], "extra": [list(p) for p in ref.extra],
                          "observed_trials": sum(len(v) for v in obs.values())}
                client.log_dict(parent_id, record, f"{ROUND_ARTIFACT_DIR}/round-{rnd:02d}.json")
                rounds_log.append(record)
                known.update(_keys_for(spec, plan, trials))
            record = rounds_log[rnd]
            if restore_path and tune.Tuner.can_restore(restore_path):
                tuner = tune.Tuner.restore(restore_path, trainable, resume_errored=True)
            else:
                if restore_path:  # the round was recorded but its Tune run never started: drop half-made runs
                    for r in tracker.children():
                        if "grokray.phase" not in r.data.tags and r.data.tags.get("grokray.trial_key") in known:
                            _retry(client.delete_run, r.info.run_id)
                    record = {**record, "name": record["name"] + f"-{int(time.time())}"}
                    record["experiment_path"] = f"{storage.rstrip('/')}/{record['name']}"
                    client.log_dict(parent_id, record, f"{ROUND_ARTIFACT_DIR}/round-{rnd:02d}.json")
                    rounds_log[rnd] = record
                sub = PointSpec(spec, [trial_point(plan, t) for t in trials])
                round_plan = expand(sub, slots=slots, gpu_free_bytes=gpu_free)
                round_plan.swept = swept
                for p in round_plan.packs:
                    p.pack_id = f"r{rnd:02d}-{p.pack_id}"
                total_work = sum(len(p.members) * max(m.config.train.steps for m in p.members)
                                 for p in round_plan.packs)
                tuner = tune.Tuner(
                    trainable,
                    param_space=round_plan.param_space(ctx),
                    tune_config=tune.TuneConfig(max_concurrent_trials=options.max_concurrent,
                                                trial_name_creator=runner.trial_name,
                                                trial_dirname_creator=runner.trial_dirname),
                    run_config=tune.RunConfig(
                        name=record["name"], storage_path=storage,
                        failure_config=tune.FailureConfig(max_failures=options.max_failures),
                        checkpoint_config=tune.CheckpointConfig(num_to_keep=2), verbose=0,
                        callbacks=[runner.ProgressLine(round_plan.n_configs, total_work, options.progress)],
                    ),
                )
            _retry(client.set_tag, parent_id, "grokray.adaptive.round", str(rnd))
            results = tuner.fit()
            ran_rounds += 1
            errored += sum(1 for r in results if r.error is not None)
            if errored or any(not (r.metrics or {}).get("pack_done") for r in results if r.error is None):
                interrupted = True
                break
        children = tracker.children()
        obs = _observed_from_runs(plan, known, children)
        n_trials = sum(len(v) for v in obs.values())
        status = "FAILED" if errored else "KILLED" if interrupted else "FINISHED"
        counts = phase_counts(children)
        metrics = [Metric(f"phase_count/{p}", float(n), _now_ms(), 0) for p, n in counts.items()]
        metrics += [Metric("adaptive/trials", float(n_trials), _now_ms(), 0),
                    Metric("adaptive/rounds", float(len(rounds_log)), _now_ms(), 0)]
        tags = {f"grokray.phase_count.{p}": n for p, n in counts.items()}
        tags["grokray.configurations"] = n_trials
        log_metrics(client, parent_id, metrics, tags)
        client.set_terminated(parent_id, status)
        return AdaptiveSummary(
            name=spec.name, tracking_uri=uri, experiment_id=tracker.experiment_id, parent_run_id=parent_id,
            rounds=len(rounds_log), trials=n_trials, budget=plan.budget, full_grid=plan.full_grid_trials,
            phase_counts=counts, errored_trials=errored, interrupted=interrupted, wall_s=time.time() - t_start,
            rounds_log=rounds_log,
        )
    finally:
        if started_ray:
            ray.shutdown()
