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

Scheduling (run.adaptive): rounds of ordinary packed Tune runs, not a Tune `Searcher`. A round's points are
expanded and packed by `plan.expand` (same pack signature, same auto pack size) and run over `train_pack` by the
same launch layer as `grokray run`; every configuration is a child run of one MLflow parent. A Searcher proposes
one trial at a time from individual results, which would put one configuration in each Tune trial and lose
packing (the main cost saving on both CPU and GPU), and its state would live in Tune's experiment checkpoint
rather than MLflow. Refinement also needs a whole round (all neighbours of a cell) before deciding, which rounds
give for free. The price is a barrier per round (a few rounds: log2 of target/start per axis plus extra-seed rounds).

Resume: before a round starts its points are written on the parent run (artifact `adaptive/round-NN.json`) and
the round's Tune experiment path is tagged. `--resume` reads the finished child runs (phase tag, by trial key)
and the last round file, restores that round's Tune experiment (finished packs are not re-run, running ones
continue from their checkpoints) or, when none was written yet, trains only the round's unfinished points, then
carries on. No finished configuration is trained twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from ..phases import PHASES
from .lattice import AdaptivePlan, Index, Lattice, Trial


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


def ranked_candidates(leaves, present: set, observed, phases, uncertain, rules) -> list:
    """(rank, cell, reason, points to add) in the order next_points takes them: boundaries (1), extra seeds (2),
    disagreement (3); coarser cells first, then cells with more phases at their corners, then the cheapest.
    `phases(p)`: a point's phases by seed; `uncertain(p)`: whether its seeds disagree past the rule."""
    candidates = []
    for cell in leaves:
        pts, kids = cell.split()
        if not kids:
            continue
        if any(c not in present for c in cell.corners):
            continue  # cannot happen for sets next_points built; ignore rather than guess
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
    return [(r, key[-1], reason, pts) for r, _, key, reason, pts in sorted(candidates, key=lambda c: c[:3])]


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
    ranks = ranked_candidates(leaves, present, observed, phases, uncertain, rules)
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
