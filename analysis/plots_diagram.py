"""The phase diagram and its companion, the steps heatmap: the two figures every sweep, `grokray analyze` and the
atlas draw. Both say what they aggregate in a subtitle, and their legends list only what the figure shows.

The heatmap colours each cell by the median steps to generalize over its decodable seeds, a seed that never got
there counting as never (analysis.diagram: `steps`). A median over only the seeds that generalized would draw a
cell with one fast seed and two that fail as the fastest cell of the figure.
"""

from __future__ import annotations

import numpy as np
from matplotlib.colors import LogNorm, Normalize, to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .diagram import UNDECODABLE, Comparison, PhaseGrid
from .plots import (
    CellAxis,
    cell_centre,
    draw_cells,
    facet_cells,
    facet_title,
    finish_figure,
    grid_layout,
    new_figure,
    phase_color,
    phase_legend,
    steps_ticks,
    titled,
)

MAX_ANNOTATED = 150  # cells per panel above which agreement is shown by opacity only
NEVER_COLOR = "#dddddd"


def _annotate(ax, grid: PhaseGrid, cells, texts) -> None:
    ax_x, ax_y = CellAxis(grid.x_values, grid.x_log), CellAxis(grid.y_values, grid.y_log)
    size = 7 if len(cells) <= 50 else 5
    for xv, yv, text in zip(cells[grid.x], cells[grid.y], texts, strict=True):
        if text:
            ax.text(cell_centre(ax_x, xv), cell_centre(ax_y, yv), text, ha="center", va="center", fontsize=size,
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "alpha": 0.85, "edgecolor": "none"})
            # on a white ground: a tie's hatching hid the label


def _panels(grid: PhaseGrid, extra_w: float):
    nrows, ncols, size = grid_layout(len(grid.facet_values), extra_w=extra_w)
    fig = new_figure(*size)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in list(axes.flat)[len(grid.facet_values):]:
        ax.set_visible(False)
    return fig, axes


def phase_panel(ax, grid: PhaseGrid, fv: tuple, annotate: bool | None) -> None:
    """One panel of majority phases: opacity = agreement, a tie split between its phases and hatched, 'k/n' where
    seeds disagree."""
    cells = facet_cells(grid, fv)
    colors = [to_rgba(phase_color(p), 0.25 + 0.75 * a) for p, a in zip(cells["phase"], cells["agreement"],
                                                                           strict=True)]
    tie = cells["tie"].astype(bool).tolist() if "tie" in cells else None
    # a tie is split between its phases, in the phase order, so no one of them is shown as the cell's
    split = [[to_rgba(phase_color(p), 0.25 + 0.75 * a) for p in t.split("|")] if t else []
             for t, a in zip(cells["tie"], cells["agreement"], strict=True)] if tie else None
    draw_cells(ax, grid, cells, colors, hatched=tie, split=split)
    if annotate if annotate is not None else len(cells) <= MAX_ANNOTATED:
        voters = cells["n"] - (cells["n_undecodable"] if "n_undecodable" in cells else 0)
        _annotate(ax, grid, cells, [f"{round(a * v)}/{v}" if v > 1 and a < 1 else "" for a, v in
                                    zip(cells["agreement"], voters, strict=True)])


def plot_phase_diagram(grid: PhaseGrid, path=None, *, title: str | None = None, subtitle: str | None = None,
                       annotate: bool | None = None) -> Figure:
    """Majority phase per cell, one panel per facet value. Colour = phase (fixed), opacity = seed agreement;
    cells where seeds disagree are annotated 'k/n' (majority count / voting seeds) unless there are too many."""
    fig, axes = _panels(grid, 2.0)
    cells_all = grid.cells
    for k, fv in enumerate(grid.facet_values):
        ax = axes.flat[k]
        phase_panel(ax, grid, fv, annotate)
        if grid.facets:
            ax.set_title(facet_title(grid, fv), fontsize=9)
    present = [p for p in (*grid.phases, UNDECODABLE) if (cells_all["phase"] == p).any()]
    notes = [text for shown, text in (
        ((cells_all["agreement"] < 1).any(), "faded, k/n: seeds disagree"),
        ((cells_all["tie"] != "").any(), "split, hatched: a tie"),
        ((cells_all["n_undecodable"] > 0).any(), "undecodable splits do not vote")) if shown]
    phase_legend(fig, present, ";\n".join(notes) or None)
    titled(fig, title or f"phase diagram: {grid.y} vs {grid.x}", subtitle)
    return finish_figure(fig, path)


def plot_steps_heatmap(grid: PhaseGrid, path=None, *, title: str | None = None, subtitle: str | None = None,
                       annotate: bool | None = None, unit: str = "steps") -> Figure:
    """Median steps (`unit`: the RFM counts iterations) to generalize per cell, on a log colour scale; a seed that
    never generalized counts as never, and a cell whose median is never is grey. A cell where only some seeds
    generalized says 'k/n'."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable

    fig, axes = _panels(grid, 1.8)
    vals = grid.cells["steps"].to_numpy(dtype=float)
    finite = vals[np.isfinite(vals) & (vals > 0)]
    if len(finite) and finite.min() < finite.max():
        norm = LogNorm(float(finite.min()), float(finite.max()))
    else:
        v = float(finite[0]) if len(finite) else 1.0
        norm = LogNorm(max(v / 2, 1.0), max(v * 2, 2.0)) if v > 0 else Normalize(0, 1)
    cmap = colormaps["viridis_r"]  # dark = slow, light = fast: a slow cell never looks like the best one
    for k, fv in enumerate(grid.facet_values):
        ax, cells = axes.flat[k], facet_cells(grid, fv)
        colors = [cmap(norm(v)) if np.isfinite(v) and v > 0 else to_rgba(NEVER_COLOR) for v in cells["steps"]]
        draw_cells(ax, grid, cells, colors)
        if annotate if annotate is not None else len(cells) <= MAX_ANNOTATED:
            voters = cells["n"] - cells["n_undecodable"]
            _annotate(ax, grid, cells, [f"{round(s * v)}/{v}" if v > 1 and s < 1 else "" for s, v in
                                        zip(cells["share_generalized"].fillna(1.0), voters, strict=True)])
        if grid.facets:
            ax.set_title(facet_title(grid, fv), fontsize=9)
    if len(finite):
        bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes.ravel().tolist(),
                           label=f"median {unit} to generalize\n(grey: most seeds never did; k/n: seeds that did)")
        if isinstance(norm, LogNorm):
            steps_ticks(bar.ax.yaxis)
    else:  # a colour bar would show a scale no cell uses
        fig.legend(handles=[Patch(facecolor=NEVER_COLOR, label="no cell generalized\nwithin the budget")],
                   loc="outside right center", frameon=False)
    titled(fig, title or f"{unit} to generalize", subtitle)
    return finish_figure(fig, path)


def plot_comparison(cmp: Comparison, path=None, *, labels: tuple[str, str] = ("A", "B"),
                    title: str | None = None, mixed: list[str] | tuple = ()) -> Figure:
    """Per facet: diagram A, diagram B, and the changed-cells map (changed cells in B's phase colour with a thick
    edge in A's; unchanged cells grey; cells present in one experiment only hatched). `mixed`: how the two
    launches differ in setup (`analyze --mixed`), marked in red under the title: a figure passed on alone must
    still say that its sides ran under different budgets, thresholds or seeds."""
    ga, gb = cmp.grid_a, cmp.grid_b
    union = PhaseGrid(cmp.cells.rename(columns={"phase_b": "phase", "agreement_b": "agreement", "n_b": "n"}),
                      ga.x, ga.y, ga.facets, ga.x_log or gb.x_log, ga.y_log or gb.y_log,
                      _merge_values(ga.x_values, gb.x_values), _merge_values(ga.y_values, gb.y_values),
                      list(dict.fromkeys(ga.facet_values + gb.facet_values)), ga.phases, ga.steps_col)
    ga = ga._replace(x_values=union.x_values, y_values=union.y_values, x_log=union.x_log, y_log=union.y_log)
    gb = gb._replace(x_values=union.x_values, y_values=union.y_values, x_log=union.x_log, y_log=union.y_log)
    nf = len(union.facet_values)
    fig = new_figure(4.0 * 3 + 2.2, 3.6 * nf)
    axes = fig.subplots(nf, 3, squeeze=False)
    for row, fv in enumerate(union.facet_values):
        for col, (g, name) in enumerate(((ga, labels[0]), (gb, labels[1]))):
            ax = axes[row, col]
            if fv in g.facet_values:
                phase_panel(ax, g, fv, None)
            ax.set_title(name + (f"  [{facet_title(union, fv)}]" if union.facets else ""), fontsize=9)
        ax = axes[row, 2]
        cells = facet_cells(union, fv).sort_values("changed", kind="stable")  # changed last: edges on top
        both = cells["phase_a"].notna() & cells["phase"].notna()
        face, edge, width = [], [], []
        for b, ch, pa, pb in zip(both, cells["changed"], cells["phase_a"], cells["phase"], strict=True):
            if not b:
                face.append(to_rgba("white"))
                edge.append(to_rgba("#999999"))
                width.append(0.5)
            elif ch:
                face.append(to_rgba(phase_color(pb)))
                edge.append(to_rgba(phase_color(pa)))
                width.append(2.5)
            else:
                face.append(to_rgba("#e6e6e6"))
                edge.append(to_rgba("white"))
                width.append(0.3)
        draw_cells(ax, union, cells, face, edgecolors=edge, linewidths=width)
        n_changed = int(cells["changed"].sum())
        ax.set_title(f"changed: {n_changed} cell{'s' if n_changed != 1 else ''} (fill {labels[1]}, edge {labels[0]})",
                     fontsize=9)
    lines = [f"{n} {a} → {b}" for a, b, n in zip(cmp.transitions["from"], cmp.transitions["to"],
                                                  cmp.transitions["cells"], strict=True)]
    shown = {*cmp.cells["phase_a"].dropna(), *cmp.cells["phase_b"].dropna()}  # the legend names what is drawn
    phase_legend(fig, [p for p in union.phases if p in shown], None)
    fig.suptitle(title or (f"{labels[0]} vs {labels[1]}: " + ("; ".join(lines[:4]) if lines else "no phase changed")))
    if mixed:
        fig.text(0.5, 0.005, "MIXED: " + "; ".join(mixed), ha="center", va="bottom", color="#b00020", fontsize=9)
    return finish_figure(fig, path)


def _merge_values(a: list, b: list) -> list:
    vals = list(dict.fromkeys(list(a) + list(b)))
    try:
        return sorted(vals)
    except TypeError:
        return sorted(vals, key=str)
