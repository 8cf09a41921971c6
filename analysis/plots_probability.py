"""Drawing only: a ProbabilityMap (analysis.probability) as two panels on its target lattice.

Left: the majority phase of the nearest sampled point, opacity = the Wilson lower bound of the majority share
(confidence). Right: where more seeds could change the answer (Wilson interval of the majority share reaching
0.5), shaded by how far below 0.5 the lower bound goes. Sampled points are marked in both (dot size ~ seeds).
"""

from __future__ import annotations

import numpy as np
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .diagram import PhaseGrid
from .plots import draw_cells, finish_figure, new_figure, phase_color, phase_legend
from .probability import ProbabilityMap

__all__ = ["plot_probability_map"]


def _grid(pm: ProbabilityMap) -> PhaseGrid:
    return PhaseGrid(pm.lattice, pm.x, pm.y, (), pm.x_log, pm.y_log, pm.x_values, pm.y_values, [()], pm.phases,
                     "step_val")


def _mark(ax, pm: ProbabilityMap) -> None:
    c = pm.cells
    ax.scatter(c[pm.x], c[pm.y], s=4 + 6 * np.sqrt(c["n"].to_numpy(dtype=float)), c="black", marker="o",
               linewidths=0, zorder=3)


def plot_probability_map(pm: ProbabilityMap, path=None, *, title: str | None = None) -> Figure:
    """Majority phase shaded by confidence, and the unsettled-cells companion map, sampled points marked."""
    fig = new_figure(4.4 * 2 + 2.2, 4.0)
    left, right = fig.subplots(1, 2, squeeze=True)
    grid = _grid(pm)
    lat = pm.lattice
    conf = lat["share_lo"].fillna(0).to_numpy(dtype=float)
    colors = [to_rgba(phase_color(p), 0.2 + 0.8 * c) for p, c in zip(lat["phase"], conf, strict=True)]
    draw_cells(left, grid, lat, colors, linewidths=0.0)
    _mark(left, pm)
    left.set_title(f"majority phase (opacity: Wilson lower bound, z={pm.z:.2f})", fontsize=9)
    margin = np.clip(0.5 - conf, 0, 0.5) / 0.5  # 0: settled; 1: lower bound at 0
    colors = [to_rgba("#d62728", 0.15 + 0.85 * m) if u else to_rgba("#e6e6e6")
              for u, m in zip(lat["unsettled"], margin, strict=True)]
    draw_cells(right, grid, lat, colors, linewidths=0.0)
    _mark(right, pm)
    n_uns = int(pm.cells["unsettled"].sum())
    right.set_title(f"more seeds could change the answer: {n_uns}/{len(pm.cells)} sampled cells", fontsize=9)
    phase_legend(fig, [p for p in pm.phases if p in set(lat["phase"])], None)
    right.legend(handles=[Patch(facecolor="#d62728", label="Wilson interval reaches 0.5"),
                          Patch(facecolor="#e6e6e6", label="settled")], fontsize=7, loc="upper right")
    fig.suptitle(title or f"phase probability: {pm.y} vs {pm.x} ({len(pm.cells)} sampled of "
                 f"{len(pm.x_values) * len(pm.y_values)} lattice points)")
    return finish_figure(fig, path)
