"""Phase-probability maps: per cell, the share of seeds in each phase with Wilson intervals, and the majority
phase filled over a (possibly unevenly sampled) target lattice. Data only; `analysis.plots_probability` draws it.

An adaptive sweep (grokray.plan.lattice) samples a lattice unevenly: densely at boundaries, sparsely inside
uniform regions. `probability_map` fills every lattice point with the nearest sampled point (distance in lattice
steps, each axis in its own scale: log10 for log axes), so uniform regions are drawn as regions and sampled
points stay marked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from .diagram import canonical, log_axes, phase_order

__all__ = ["ProbabilityMap", "agreement", "infer_lattice", "probability_map", "wilson_interval"]

Z95 = 1.959963984540054


def wilson_interval(k, n, z: float = Z95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval of a binomial share k/n (arrays or scalars); (nan, nan) where n == 0."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        denom = 1 + z**2 / n
        centre = (p + z**2 / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    lo, hi = np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)
    return np.where(n > 0, lo, np.nan), np.where(n > 0, hi, np.nan)


class ProbabilityMap(NamedTuple):
    """cells: one row per sampled (x, y) with n, count_/frac_/lo_/hi_<phase> for every phase, `phase` (majority;
    ties to the earlier phase), `share` (majority share) with `share_lo`/`share_hi` (Wilson) and `unsettled`
    (share_lo <= 0.5: more seeds could change the majority).
    lattice: one row per target lattice point (ix, iy, x, y) with the nearest sampled cell's phase, share,
    share_lo, unsettled, n, `sampled` (a run sits exactly here) and `distance` (to it, in lattice steps)."""

    cells: pd.DataFrame
    lattice: pd.DataFrame
    x: str
    y: str
    x_log: bool
    y_log: bool
    x_values: list
    y_values: list
    phases: tuple[str, ...]
    z: float


def _scale(values, log: bool) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    return np.log10(v) if log else v


def infer_lattice(values: Iterable, log: bool = False, rtol: float = 1e-6) -> list[float]:
    """The evenly spaced lattice (in the axis's scale) that the sampled values lie on: from min to max with the
    smallest gap between sampled values as its step."""
    t = np.unique(np.round(_scale(list(values), log), 12))
    if len(t) < 2:
        return [float(10**v if log else v) for v in t]
    step = float(np.min(np.diff(t)))
    n = int(round((t[-1] - t[0]) / step)) + 1
    grid = np.linspace(t[0], t[-1], n)
    off = np.abs(t[:, None] - grid[None, :]).min(axis=1)
    if np.any(off > rtol + 1e-3 * step):
        raise ValueError("sampled values do not lie on one evenly spaced lattice; pass x_values/y_values")
    return [float(v) for v in (10**grid if log else grid)]


def probability_map(df: pd.DataFrame, x: str, y: str, *, x_values: Sequence | None = None,
                    y_values: Sequence | None = None, log: Iterable[str] | None = None, z: float = Z95,
                    phases: Sequence[str] | None = None) -> ProbabilityMap:
    """Runs (one row per configuration and seed; columns x, y, phase) -> per-cell phase probabilities and the
    nearest-point fill of the target lattice (x_values/y_values; default: inferred from the sampled values)."""
    for a in (x, y):
        if a not in df:
            raise KeyError(f"axis {a!r} is not a column; columns: {sorted(map(str, df.columns))}")
    runs = df[df["phase"].notna()].copy()
    if runs.empty:
        raise ValueError("no finished runs (none has a phase)")
    for a in (x, y):
        runs[a] = pd.to_numeric(runs[a]).map(canonical)
    order = tuple(phases) if phases is not None else phase_order(df)
    is_log = log_axes(runs, [x, y], declared=df.attrs.get("log_axes", ()) if log is None else log)
    counts = pd.crosstab([runs[y], runs[x]], runs["phase"]).reindex(columns=list(order), fill_value=0)
    cells = counts.reset_index()
    cells.columns = [y, x, *(f"count_{p}" for p in order)]
    cells = cells[[x, y, *(f"count_{p}" for p in order)]]
    k = cells[[f"count_{p}" for p in order]].to_numpy(dtype=float)
    n = k.sum(axis=1)
    cells.insert(2, "n", n.astype(int))
    for j, p in enumerate(order):
        lo, hi = wilson_interval(k[:, j], n, z)
        cells[f"frac_{p}"] = k[:, j] / n
        cells[f"lo_{p}"] = lo
        cells[f"hi_{p}"] = hi
    best = np.argmax(k, axis=1)  # first maximum: ties go to the earlier phase
    top = k[np.arange(len(k)), best]
    cells["phase"] = [order[b] for b in best]
    cells["share"] = top / n
    cells["share_lo"], cells["share_hi"] = wilson_interval(top, n, z)
    cells["unsettled"] = cells["share_lo"] <= 0.5
    cells = cells.sort_values([y, x], kind="stable").reset_index(drop=True)

    xs = list(x_values) if x_values is not None else infer_lattice(cells[x], is_log[x])
    ys = list(y_values) if y_values is not None else infer_lattice(cells[y], is_log[y])
    xs, ys = [canonical(float(v)) for v in xs], [canonical(float(v)) for v in ys]
    tx, ty = _scale(xs, is_log[x]), _scale(ys, is_log[y])
    sx = float(np.min(np.diff(tx))) if len(tx) > 1 else 1.0
    sy = float(np.min(np.diff(ty))) if len(ty) > 1 else 1.0
    cx, cy = _scale(cells[x], is_log[x]) / sx, _scale(cells[y], is_log[y]) / sy
    gx, gy = np.meshgrid(tx / sx, ty / sy, indexing="ij")
    d2 = (gx[..., None] - cx) ** 2 + (gy[..., None] - cy) ** 2
    nearest = np.argmin(d2, axis=-1)  # ties: the earlier cell (sorted by y, then x)
    dist = np.sqrt(np.take_along_axis(d2, nearest[..., None], axis=-1)[..., 0])
    ix, iy = np.meshgrid(np.arange(len(xs)), np.arange(len(ys)), indexing="ij")
    src = cells.iloc[nearest.ravel()].reset_index(drop=True)
    lattice = pd.DataFrame({
        "ix": ix.ravel(), "iy": iy.ravel(), x: np.asarray(xs)[ix.ravel()], y: np.asarray(ys)[iy.ravel()],
        "phase": src["phase"], "share": src["share"], "share_lo": src["share_lo"], "unsettled": src["unsettled"],
        "n": src["n"], "distance": dist.ravel(), "sampled": dist.ravel() < 1e-6,
    })
    return ProbabilityMap(cells, lattice, x, y, is_log[x], is_log[y], xs, ys, order, z)


def agreement(a: ProbabilityMap, b: ProbabilityMap) -> float:
    """Share of lattice points whose filled majority phase is the same in two maps on the same lattice."""
    ka = a.lattice.set_index(["ix", "iy"])["phase"]
    kb = b.lattice.set_index(["ix", "iy"])["phase"]
    both = ka.index.intersection(kb.index)
    return float((ka.loc[both] == kb.loc[both]).mean()) if len(both) else math.nan
