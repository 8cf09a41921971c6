"""Drawing only: every function takes data computed by analysis.diagram / load / representations / effective_theory
and returns a matplotlib Figure; given `path`, it also writes path.png and path.svg.

Figures are built on the Agg canvas directly (no pyplot, no global backend switch, safe in workers and tests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from grokray.numbers import short_number

from .diagram import FractionCurve, PhaseGrid
from .labels import axis_label, tick_label

__all__ = ["PHASE_COLORS", "plot_agop", "plot_curves", "plot_embedding_pca",
           "plot_grokking_time", "save_figure"]  # the phase diagram, heatmap, comparison: analysis.plots_diagram

# Fixed colour per phase, identical in every figure.
PHASE_COLORS = {
    "comprehension": "#1b9e77",  # green
    "grokking": "#f28e2b",  # orange
    "memorization": "#4e79a7",  # blue
    "confusion": "#e15759",  # red
    "val_without_train": "#b07aa1",  # purple
    "diverged": "#333333",  # near black
}
OTHER_COLOR = "#bbbbbb"


def new_figure(w: float, h: float) -> Figure:
    fig = Figure(figsize=(w, h), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | Path, formats: Sequence[str] = ("png", "svg"), dpi: int = 150) -> list[Path]:
    """Write `path` with each suffix in `formats` (an existing suffix on `path` is replaced). Returns the paths."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for fmt in formats:
        target = path.with_suffix("." + fmt)
        fig.savefig(target, dpi=dpi, format=fmt)
        out.append(target)
    return out


def finish_figure(fig: Figure, path) -> Figure:
    if path is not None:
        save_figure(fig, path)
    return fig


def phase_color(phase) -> str:
    return PHASE_COLORS.get(phase, OTHER_COLOR)


def _fmt(v) -> str:
    return short_number(v) if isinstance(v, float | np.floating) else str(v)


def _slot_key(v):
    """NaN (a parameter a run did not set) as one hashable key: NaN never equals itself, so a dict misses it."""
    return "nan" if isinstance(v, float | np.floating) and np.isnan(v) else v


class CellAxis:
    """Cell geometry of one diagram axis: numeric (linear or log) or categorical (evenly spaced)."""

    def __init__(self, values: list, log: bool):
        self.values = values
        nums = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce")
        self.numeric = bool(len(values)) and not nums.isna().any()
        self.log = log and self.numeric
        if self.numeric and not self.log and len(values) > 2:
            gaps = np.diff(nums.to_numpy(dtype=float))
            # irregular linear values (wd 0, 0.1, 0.3, 1, 3) get evenly spaced slots so no cell is a sliver; values
            # on a coarse lattice (an adaptive sweep's refined points: every gap a whole number of the smallest, at
            # most 4 lattice points a value) keep their places (they were spaced evenly, 0.625 as far from 0 as 5
            # from 2.5)
            smallest = gaps.min()  # 0 only for a repeated value
            steps = gaps / smallest if smallest > 0 else gaps
            self.numeric = bool(smallest > 0 and np.allclose(steps, np.round(steps), rtol=0, atol=1e-6)
                                and steps.sum() + 1 <= 4 * len(values))
        if not self.numeric:
            self.pos = {_slot_key(v): float(i) for i, v in enumerate(values)}
            centres = np.arange(max(len(values), 1), dtype=float)  # an empty axis still gets one slot
            self.edges = np.concatenate([[-0.5], centres + 0.5])
            return
        v = nums.to_numpy(dtype=float)
        t = np.log10(v) if self.log else v
        if len(t) == 1:  # one value: a unit cell (a decade on a log axis, +-50% of the value on a linear one)
            half = np.array([0.5 if self.log or t[0] == 0 else 0.5 * abs(t[0])])
        else:
            half = np.diff(t) / 2
        inner = t[:-1] + half[: len(t) - 1] if len(t) > 1 else np.array([])
        first, last = t[0] - half[0], t[-1] + half[-1]
        edges_t = np.concatenate([[first], inner, [last]])
        self.edges = 10**edges_t if self.log else edges_t
        self.pos = {val: k for k, val in enumerate(values)}

    def span(self, value) -> tuple[float, float]:
        k = self.slot(value)
        return float(self.edges[k]), float(self.edges[k + 1])

    def slot(self, value) -> int:
        return int(self.pos[_slot_key(value)]) if not self.numeric else self.pos[value]

    def spans(self, values) -> tuple[np.ndarray, np.ndarray]:
        """Every value's cell edges at once, as two arrays."""
        k = np.fromiter((self.slot(v) for v in values), dtype=np.intp)
        return self.edges[k].astype(float), self.edges[k + 1].astype(float)

    def spread(self, values: list[float]) -> list[float]:
        """The values to label, at least a twelfth of the axis apart in its own scale, the first and the last
        kept: an adaptive sweep's refined points (5.6e-3, 7.5e-3, 1e-2) ran into each other."""
        t = np.log10(values) if self.log else np.asarray(values)
        kept = [0]
        for k in range(1, len(t)):
            if t[k] - t[kept[-1]] >= (t[-1] - t[0]) / 12 - 1e-12:
                kept.append(k)
        kept[-1] = len(t) - 1  # the last value is labelled; one too close before it is not
        return [values[k] for k in kept]

    def style(self, ax, which: str, label: str) -> None:
        set_scale, set_lim, set_ticks, set_label = (
            (ax.set_xscale, ax.set_xlim, ax.set_xticks, ax.set_xlabel) if which == "x"
            else (ax.set_yscale, ax.set_ylim, ax.set_yticks, ax.set_ylabel))
        if self.log:
            set_scale("log")
        set_lim(self.edges[0], self.edges[-1])
        if not self.numeric:
            set_ticks(range(len(self.values)), [tick_label(v) for v in self.values])
        elif len(self.values) <= 12:
            shown = self.spread([float(v) for v in self.values])
            set_ticks(shown, [tick_label(v, self.log) for v in shown])
            (ax.xaxis if which == "x" else ax.yaxis).set_minor_locator(_null_locator())
        set_label(axis_label(label))
        labels = [t.get_text() for t in ax.get_xticklabels()] if which == "x" else []
        if which == "x" and (len(self.values) > 6 or len(labels) * max(map(len, labels), default=0) > 30):
            for t in ax.get_xticklabels():  # six ticks like 2.5e-4 side by side would run into each other
                t.set_rotation(45)


def _null_locator():
    from matplotlib.ticker import NullLocator

    return NullLocator()


def facet_title(grid: PhaseGrid, fv: tuple) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in zip(grid.facets, fv, strict=True))


def facet_cells(grid: PhaseGrid, fv: tuple) -> pd.DataFrame:
    cells = grid.cells
    for k, v in zip(grid.facets, fv, strict=True):
        cells = cells[cells[k] == v]
    return cells


def draw_cells(ax, grid: PhaseGrid, cells: pd.DataFrame, colors: list, edgecolors=None, linewidths=0.3,
               hatched: Sequence[bool] | None = None, split: Sequence[list] | None = None) -> None:
    """One box per cell in its colour; `split`: per cell, colours to divide it into side by side (a tie drawn as
    every tied phase, none of them first), or an empty list for a whole cell.

    The boxes are one PolyCollection built from an array of corners, not a Rectangle artist per cell: a launch's
    close draws its whole lattice, and an artist per cell cost 5.8 KB of the driver's memory a cell (now 1.0)."""
    ax_x, ax_y = CellAxis(grid.x_values, grid.x_log), CellAxis(grid.y_values, grid.y_log)
    x0, x1 = ax_x.spans(cells[grid.x])
    y0, y1 = ax_y.spans(cells[grid.y])
    ax.add_collection(PolyCollection(boxes(x0, x1, y0, y1), facecolors=colors, edgecolors=edgecolors or "white",
                                     linewidths=linewidths))
    parts_of = list(split or [])
    tied = [k for k, parts in enumerate(parts_of) if parts]
    if tied:  # each tied cell cut along x into its phases' colours (equal widths on the axis as drawn)
        cut_boxes, cut_colors = [], []
        for k in tied:
            n = len(parts_of[k])
            cuts = (np.geomspace(x0[k], x1[k], n + 1) if ax_x.log and x0[k] > 0 else
                    np.linspace(x0[k], x1[k], n + 1))
            cut_boxes.append(boxes(cuts[:-1], cuts[1:], np.full(n, y0[k]), np.full(n, y1[k])))
            cut_colors.extend(parts_of[k])
        ax.add_collection(PolyCollection(np.concatenate(cut_boxes), facecolors=cut_colors, edgecolors="none"))
    if hatched is not None and any(hatched):  # a tie between phases: hatched over its colour
        h = np.asarray(hatched, dtype=bool)
        ax.add_collection(PolyCollection(boxes(x0[h], x1[h], y0[h], y1[h]), facecolors="none",
                                         edgecolors="black", linewidths=0, hatch="///"))
    ax_x.style(ax, "x", grid.x)
    ax_y.style(ax, "y", grid.y)


def boxes(x0, x1, y0, y1) -> np.ndarray:
    """Axis-aligned boxes as an (n, 4, 2) array of corners, for a PolyCollection."""
    x0, x1, y0, y1 = (np.asarray(v, dtype=float) for v in (x0, x1, y0, y1))
    return np.stack([np.stack([x0, y0], -1), np.stack([x1, y0], -1), np.stack([x1, y1], -1),
                     np.stack([x0, y1], -1)], axis=1)


def cell_centre(axis: CellAxis, value) -> float:
    a, b = axis.span(value)
    return math.sqrt(a * b) if axis.log else (a + b) / 2


def grid_layout(n: int, panel=(4.2, 3.6), extra_w: float = 2.0):
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    return nrows, ncols, (panel[0] * ncols + extra_w, panel[1] * nrows)


def phase_legend(fig: Figure, phases: Sequence[str], note: str | None = None) -> None:
    """A legend of the phases given (the ones the figure shows), and a note on how to read it."""
    handles = [Patch(facecolor=phase_color(p), label=p.replace("_", " ")) for p in phases]
    if note:
        handles.append(Patch(facecolor="white", edgecolor="none", label=note))
    fig.legend(handles=handles, loc="outside right center", frameon=False, title="phase")


def steps_ticks(axis) -> None:
    """A log axis of steps ticked at 1, 2 and 5 per decade and written 5e2, 1e3, 2e3 (not 2 x 10^3)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: tick_label(v, log=True)))
    axis.set_minor_formatter(NullFormatter())


def titled(fig: Figure, title: str, subtitle: str | None) -> None:
    """The title, and under it what the figure aggregates (seeds, budget, configurations)."""
    fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=11)


def plot_curves(curves: pd.DataFrame, path=None, *, labels: dict | None = None,
                keys: Sequence[str] = ("train/acc", "val/acc"), threshold: float | None = 0.9,
                title: str | None = None) -> Figure:
    """Series from analysis.load_curves against step on a log x-axis: one colour per run, one line style per key
    (train dashed, val solid). Step 0 cannot sit on a log axis and is left out."""
    fig = new_figure(7.5, 4.5)
    ax = fig.subplots()
    styles = ["--", "-", ":", "-."]
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    data = curves[curves["step"] > 0]
    for r, run_id in enumerate(dict.fromkeys(data["run_id"])):
        run = data[data["run_id"] == run_id]
        name = (labels or {}).get(run_id, str(run_id)[:8])
        for k, key in enumerate(keys):
            s = run[run["key"] == key]
            if len(s):
                ax.plot(s["step"], s["value"], styles[k % len(styles)], color=cmap(r % 10), lw=1.3,
                        label=f"{name} {key}")
    ax.set_xscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(" / ".join(keys))
    if threshold is not None:
        ax.axhline(threshold, color="grey", lw=0.8, ls=":")
    ax.legend(fontsize=7, loc="best")
    ax.set_title(title or "training curves")
    return finish_figure(fig, path)


def plot_grokking_time(curve: FractionCurve, path=None, *, theory: pd.DataFrame | None = None,
                       title: str | None = None, subtitle: str | None = None) -> Figure:
    """Top: share of generalizing runs against data fraction, with the effective-theory probability
    (analysis.effective_theory.p_unique_curve) overlaid when given. Bottom: median steps to generalize (log y,
    25-75% bars). The critical fraction is marked in both."""
    fig = new_figure(6.5, 6.0)
    top, bottom = fig.subplots(2, 1, sharex=True)
    t, f = curve.table, curve.fraction
    group_col = [c for c in t.columns if c not in {f, "n", "n_generalized", "rate", "median_steps", "q25_steps",
                                                    "q75_steps"}]
    groups = list(t.groupby(group_col[0])) if group_col else [(None, t)]
    crit = curve.critical_fraction if isinstance(curve.critical_fraction, dict) else {None: curve.critical_fraction}
    for k, (g, sub) in enumerate(groups):
        label = "measured" if g is None else g if group_col[0] == "measure" else f"{group_col[0]}={_fmt(g)}"
        line = top.plot(sub[f], sub["rate"], "o-", label=label)[0]
        ok = sub["median_steps"].notna()
        lo = (sub["median_steps"] - sub["q25_steps"])[ok]
        hi = (sub["q75_steps"] - sub["median_steps"])[ok]
        bottom.errorbar(sub[f][ok], sub["median_steps"][ok], yerr=[lo, hi], fmt="o-", color=line.get_color(),
                        capsize=3, label=label)
        c = crit.get(g, float("nan"))
        if np.isfinite(c):
            for ax in (top, bottom):
                ax.axvline(c, color=line.get_color(), ls="--", lw=1)
            top.annotate(f"critical ≈ {c:.2f}", (c, curve.level), xytext=(4, 4 - 12 * k), textcoords="offset points",
                         fontsize=8)
    if theory is not None and len(theory):
        top.plot(theory["fraction"], theory["p_unique"], "k-", lw=1.2, label="effective theory: P(unique)")
        if "p_unique_decodable" in theory:
            top.plot(theory["fraction"], theory["p_unique_decodable"], "k--", lw=1.2,
                     label="P(unique and every held-out sum trained on)")
    top.axhline(curve.level, color="grey", lw=0.6, ls=":")
    top.set_ylabel("share of runs")
    top.set_ylim(-0.03, 1.03)
    top.legend(fontsize=8)
    if (t["median_steps"] > 0).any():  # nothing generalized (a short smoke run): no steps to put on a log axis
        bottom.set_yscale("log")
        steps_ticks(bottom.yaxis)
    bottom.set_ylabel("steps to it (median)")
    bottom.set_xlabel(axis_label(f))
    titled(fig, title or "grokking time against data fraction", subtitle)
    return finish_figure(fig, path)


def plot_agop(image: np.ndarray, path=None, *, p: int | None = None, title: str | None = None) -> Figure:
    """An AGOP image (analysis.representations.agop_image) with block boundaries every p rows/columns."""
    fig = new_figure(5.0, 4.4)
    ax = fig.subplots()
    lim = float(np.abs(image).max()) or 1.0
    im = ax.imshow(image, cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest")
    if p:
        for k in range(p, image.shape[0], p):
            ax.axhline(k - 0.5, color="k", lw=0.6)
            ax.axvline(k - 0.5, color="k", lw=0.6)
    fig.colorbar(im, ax=ax)
    ax.set_title(title or "AGOP (diagonal removed)")
    return finish_figure(fig, path)


def plot_embedding_pca(projected: np.ndarray, path=None, *, labels: Sequence | None = None,
                       explained: np.ndarray | None = None, title: str | None = None) -> Figure:
    """Embeddings on their first two principal components (analysis.representations.pca(...).projected)."""
    fig = new_figure(4.8, 4.4)
    ax = fig.subplots()
    proj = np.asarray(projected, dtype=float)
    xs = proj[:, 0]
    ys = proj[:, 1] if proj.shape[1] > 1 else np.zeros(len(proj))
    ax.scatter(xs, ys, c=np.arange(len(proj)), cmap="viridis", s=30)
    for k, (a, b) in enumerate(zip(xs, ys, strict=True)):
        ax.annotate(str(labels[k] if labels is not None else k), (a, b), xytext=(3, 3), textcoords="offset points",
                    fontsize=7)
    ev = explained if explained is not None else [np.nan, np.nan]
    ax.set_xlabel(f"PC1 ({ev[0]:.0%})" if np.isfinite(ev[0]) else "PC1")
    ax.set_ylabel(f"PC2 ({ev[1]:.0%})" if len(ev) > 1 and np.isfinite(ev[1]) else "PC2")
    ax.set_title(title or "embeddings (PCA)")
    return finish_figure(fig, path)
