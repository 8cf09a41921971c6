"""Plotting functions draw the computed data and write PNG and SVG files (data is checked elsewhere)."""

import numpy as np
import pandas as pd
import pytest
from test_analysis_diagram import TABLE, X, Y, make_runs

from analysis import plots
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
    fig = plots.plot_phase_diagram(grid, tmp_path / "phase")
    assert written(tmp_path / "phase")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"diverged", "val without train", "comprehension", "grokking", "memorization", "confusion"} <= labels
    assert any(t.get_text() == "2/3" for t in ax.texts)  # seeds disagree in (1e-4, 0)
    plots.plot_steps_heatmap(grid, tmp_path / "steps")
    assert written(tmp_path / "steps")


def test_faceted_and_categorical_diagram(tmp_path):
    df = pd.concat([make_runs().assign(**{"model.activation": a}) for a in ("tanh", "relu")], ignore_index=True)
    df.attrs["swept"] = [X, Y, "model.activation", "seed"]
    grid = phase_grid(df, "model.activation", X)  # a string axis and a log axis; wd becomes the facet
    assert grid.facets == (Y,)
    fig = plots.plot_phase_diagram(grid, tmp_path / "facets")
    assert written(tmp_path / "facets")
    assert sum(ax.get_visible() for ax in fig.axes) == 2


def test_comparison_figure(tmp_path):
    other = dict(TABLE)
    other[(1e-3, 0)] = ["comprehension"] * 3
    cmp = compare(make_runs(), make_runs(other), X, Y)
    fig = plots.plot_comparison(cmp, tmp_path / "compare", labels=("wd grid", "new optimizer"))
    assert written(tmp_path / "compare")
    assert "grokking → comprehension" in fig.get_suptitle()


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
    fig = plots.plot_phase_diagram(phase_grid(make_runs(), X, Y))
    paths = plots.save_figure(fig, tmp_path / "sub" / "x.png", formats=formats)
    assert [p.suffix for p in paths] == ["." + f for f in formats] and all(p.exists() for p in paths)
