"""Plotting functions draw the computed data and write PNG and SVG files (data is checked elsewhere)."""

import numpy as np
import pandas as pd
import pytest
from test_analysis_diagram import TABLE, X, Y, make_runs

from analysis import plots, plots_diagram
from analysis.diagram import compare, generalization_vs_fraction, phase_grid
from analysis.effective_theory import p_unique_curve
from analysis.representations import agop_image, pca


def written(base):
    for suffix in (".png", ".svg"):
        f = base.with_suffix(suffix)
        assert f.exists() and f.stat().st_size > 1000, f
    return True


def test_phase_diagram_and_heatmap(tmp_path):
    grid = phase_grid(make_runs(), X, Y)
    fig = plots_diagram.plot_phase_diagram(grid, tmp_path / "phase")
    assert written(tmp_path / "phase")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    # the legend lists the phases the figure shows (no cell's majority is val_without_train), then how to read it
    assert labels[:5] == ["comprehension", "grokking", "memorization", "confusion", "diverged"]
    assert labels[5:] == ["faded, k/n: seeds disagree;\nsplit, hatched: a tie"]
    # the three-way tie at (1e-4, 1) is drawn as three slices, one per tied phase, not as comprehension's cell
    from matplotlib.colors import to_hex

    slices = [c for c in ax.collections if len(c.get_paths()) == 3 and c.get_hatch() is None]
    assert len(slices) == 1
    assert [to_hex(f, keep_alpha=False) for f in slices[0].get_facecolors()] == [
        to_hex(plots.phase_color(p)) for p in ("comprehension", "grokking", "memorization")]
    left, right = (path.get_extents() for path in (slices[0].get_paths()[0], slices[0].get_paths()[2]))
    assert left.x1 <= right.x0 and left.y0 == right.y0  # side by side in the cell (lr 1e-4, wd 1)
    assert any(t.get_text() == "2/3" for t in ax.texts)  # seeds disagree in (1e-4, 0)
    # each k/n on a white ground, so a tie's hatching cannot hide it (issue 52)
    assert all(t.get_bbox_patch() is not None and t.get_bbox_patch().get_facecolor()[:3] == (1.0, 1.0, 1.0)
               for t in ax.texts if t.get_text())
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("decoder lr", "decoder weight decay")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1e-4", "1e-3", "1e-2"]
    plots_diagram.plot_steps_heatmap(grid, tmp_path / "steps")
    assert written(tmp_path / "steps")


def test_subtitle_says_seeds_budget_and_configurations():
    from analysis.labels import axis_label, runs_subtitle, step_unit, tick_label

    df = make_runs().assign(**{"phases.budget": 10_000})
    assert runs_subtitle(df) == "3 seeds (0-2) · budget 10,000 steps · 18 configurations"
    fig = plots_diagram.plot_phase_diagram(phase_grid(df, X, Y), title="t", subtitle=runs_subtitle(df))
    assert fig.get_suptitle() == "t\n3 seeds (0-2) · budget 10,000 steps · 18 configurations"
    rfm = df.assign(model="rfm", **{"phases.budget": 30})  # the RFM trainer counts iterations, not steps
    assert runs_subtitle(rfm) == "3 seeds (0-2) · budget 30 iterations · 18 configurations"
    assert "steps" in runs_subtitle(df.assign(model=["rfm", "toy"] * 9))
    heat = plots_diagram.plot_steps_heatmap(phase_grid(rfm, X, Y), unit=step_unit(rfm))
    assert heat.get_suptitle() == "iterations to generalize"
    assert axis_label("optim.embedding.init_scale") == "embedding init scale" and axis_label("task.p") == "p"
    assert [tick_label(v, log=True) for v in (3.1623e-4, 1e-2, 0.1)] == ["3.16e-4", "1e-2", "1e-1"]


def test_a_cell_with_one_fast_seed_and_two_that_fail_is_not_drawn_as_the_fastest():
    from matplotlib.colors import to_rgba

    table = {(1e-4, 0): ["comprehension", "memorization", "memorization"],  # one seed at 100 steps, two never
             (1e-3, 0): ["grokking", "grokking", "grokking"],  # every seed at 10,000 steps
             (1e-2, 0): ["grokking", "comprehension", "grokking"]}  # 10,000, 100, 10,000: median 10,000
    grid = phase_grid(make_runs(table), X, Y)
    lucky = grid.cells[grid.cells[X] == 1e-4].iloc[0]
    assert np.isnan(lucky["steps"]) and lucky["share_generalized"] == pytest.approx(1 / 3)
    assert lucky["median_steps"] == 100  # what the old heatmap coloured it by: the fastest cell
    fig = plots_diagram.plot_steps_heatmap(grid)
    ax = fig.axes[0]
    faces = ax.collections[0].get_facecolors()
    order = list(grid.cells[X])
    assert tuple(faces[order.index(1e-4)]) == to_rgba(plots_diagram.NEVER_COLOR)  # grey: the median seed never did
    assert "1/3" in [t.get_text() for t in ax.texts]


def test_faceted_and_categorical_diagram(tmp_path):
    df = pd.concat([make_runs().assign(**{"model.activation": a}) for a in ("tanh", "relu")], ignore_index=True)
    df.attrs["swept"] = [X, Y, "model.activation", "seed"]
    grid = phase_grid(df, "model.activation", X)  # a string axis and a log axis; wd becomes the facet
    assert grid.facets == (Y,)
    fig = plots_diagram.plot_phase_diagram(grid, tmp_path / "facets")
    assert written(tmp_path / "facets")
    assert sum(ax.get_visible() for ax in fig.axes) == 2


def test_comparison_figure(tmp_path):
    other = dict(TABLE)
    other[(1e-3, 0)] = ["comprehension"] * 3
    cmp = compare(make_runs(), make_runs(other), X, Y)
    fig = plots_diagram.plot_comparison(cmp, tmp_path / "compare", labels=("wd grid", "new optimizer"))
    assert written(tmp_path / "compare")
    assert "grokking → comprehension" in fig.get_suptitle()
    legend = [t.get_text() for leg in fig.legends for t in leg.get_texts()]  # issue 52: only the phases drawn
    assert set(legend) == {"comprehension", "grokking", "memorization", "confusion", "diverged"}, legend
    assert not [t for t in fig.texts if t.get_text().startswith("MIXED")]  # one setup: no mark
    mixed = plots_diagram.plot_comparison(cmp, labels=("a", "b"), mixed=["budget 300 against 6000"])
    assert [t.get_text() for t in mixed.texts if t.get_text().startswith("MIXED")] == [
        "MIXED: budget 300 against 6000"]  # issue 61: a figure told to mix says so, alone


def test_curves(tmp_path):
    steps = np.arange(0, 2001, 50)
    rows = []
    for run_id, t_grok in (("a", 300), ("b", 1500)):
        rows += [(run_id, "train/acc", s, min(1.0, s / 100)) for s in steps]
        rows += [(run_id, "val/acc", s, 1 / (1 + np.exp(-(s - t_grok) / 50))) for s in steps]
    curves = pd.DataFrame(rows, columns=["run_id", "key", "step", "value"])
    fig = plots.plot_curves(curves, tmp_path / "curves", labels={"a": "wd=1", "b": "wd=0"})
    assert written(tmp_path / "curves")
    assert fig.axes[0].get_xscale() == "log" and len(fig.axes[0].lines) == 5  # 4 curves + threshold


def test_grokking_time_with_theory(tmp_path):
    rows = [{"task.train_fraction": f, "seed": s, "phase": "grokking" if f > 0.35 + 0.05 * s else "memorization",
             "step_val": 1e3 / f} for f in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7) for s in range(4)]
    curve = generalization_vs_fraction(pd.DataFrame(rows))
    theory = p_unique_curve(10, [0.2, 0.4, 0.6], n_samples=50)
    fig = plots.plot_grokking_time(curve, tmp_path / "grok_time", theory=theory)
    assert written(tmp_path / "grok_time")
    assert np.isfinite(curve.critical_fraction)
    assert any(line.get_label().startswith("effective theory") for line in fig.axes[0].lines)


def test_representation_figures(tmp_path):
    m = np.random.default_rng(0).normal(size=(14, 14))
    plots.plot_agop(agop_image(m @ m.T), tmp_path / "agop", p=7)
    assert written(tmp_path / "agop")
    res = pca(np.random.default_rng(1).normal(size=(10, 4)))
    plots.plot_embedding_pca(res.projected, tmp_path / "pca", explained=res.explained_variance_ratio)
    assert written(tmp_path / "pca")


@pytest.mark.parametrize("formats", [("png",), ("svg", "pdf")])
def test_save_figure_formats(tmp_path, formats):
    fig = plots_diagram.plot_phase_diagram(phase_grid(make_runs(), X, Y))
    paths = plots.save_figure(fig, tmp_path / "sub" / "x.png", formats=formats)
    assert [p.suffix for p in paths] == ["." + f for f in formats] and all(p.exists() for p in paths)


def test_a_heatmap_where_nothing_generalized_has_no_colour_bar():
    """Every cell grey: a colour scale would stand for steps no run took, so the figure says 'never' instead."""
    table = {(1e-4, 0): ["memorization"] * 3, (1e-3, 0): ["confusion"] * 3}
    fig = plots_diagram.plot_steps_heatmap(phase_grid(make_runs(table), X, Y))
    assert len(fig.axes) == 1  # the diagram's panel alone: no colour-bar axes
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["no cell generalized\nwithin the budget"]
    some = plots_diagram.plot_steps_heatmap(phase_grid(make_runs(), X, Y))
    assert len(some.axes) == 2 and not some.legends  # with steps to show, the bar is back


def test_an_adaptive_lattices_values_keep_their_places_and_labels_do_not_collide():
    """Issue 61: an adaptive sweep's diagram spaced 0, 0.625, 1.25, 1.88, 2.5, 5, 7.5, 10 evenly (0.625 as far
    from 0 as 5 from 2.5), and its refined lr ticks (5.6e-3, 7.5e-3, 1e-2) ran into each other. Values on one
    lattice keep their places; irregular grid values (0, 2, 5, 10) still get even slots; labels stay apart."""
    from analysis.plots import CellAxis

    lattice = CellAxis([0.0, 0.625, 1.25, 1.875, 2.5, 5.0, 7.5, 10.0], log=False)
    assert lattice.numeric and lattice.span(5.0) == (3.75, 6.25) and lattice.span(0.625) == (0.3125, 0.9375)
    assert not CellAxis([0.0, 2.0, 5.0, 10.0], log=False).numeric  # a hand-picked grid: even slots, as before
    assert not CellAxis([0.0, 0.1, 0.3, 1.0, 3.0], log=False).numeric  # on a lattice of 31 points: slivers
    refined = [1e-4, 3.16e-4, 5.62e-4, 7.5e-4, 1e-3, 1.33e-3, 1.78e-3, 2.37e-3, 3.16e-3, 5.62e-3, 7.5e-3, 1e-2]
    shown = CellAxis(refined, log=True).spread(refined)
    assert shown[0] == 1e-4 and shown[-1] == 1e-2 and 7.5e-3 not in shown and 7.5e-4 not in shown
    gaps = np.diff(np.log10(shown))
    assert gaps.min() >= 2 / 12 - 1e-9  # a twelfth of two decades apart, at least
    even = list(np.logspace(-4, -2, 11))
    assert CellAxis(even, log=True).spread(even) == even  # an even grid of 11 keeps every label
