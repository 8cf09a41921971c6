"""Phase grids, comparisons and the fraction curve on small hand-made run frames (pure functions)."""

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from analysis.diagram import (
    compare,
    generalization_vs_fraction,
    is_log_spaced,
    phase_counts,
    phase_grid,
    pivot,
    remaining_axes,
    transition_lines,
)
from analysis.load import runs_to_frame
from grokray.phases import PHASES
from grokray.tracking.records import RunRecord

LRS = [1e-4, 1e-3, 1e-2]
WDS = [0, 1]
X, Y = "optim.decoder.lr", "optim.decoder.weight_decay"

# (lr, wd) -> phases of seeds 0, 1, 2
TABLE = {
    (1e-4, 0): ["comprehension", "comprehension", "grokking"],
    (1e-3, 0): ["grokking", "grokking", "grokking"],
    (1e-2, 0): ["memorization", "memorization", "confusion"],
    (1e-4, 1): ["comprehension", "grokking", "memorization"],  # three-way tie: earlier phase wins
    (1e-3, 1): ["diverged", "diverged", "val_without_train"],
    (1e-2, 1): ["confusion", "confusion", "confusion"],
}
STEPS = {"comprehension": 100.0, "grokking": 10_000.0, "val_without_train": 50.0}


def make_runs(table=TABLE) -> pd.DataFrame:
    rows = []
    for (lr, wd), phases in table.items():
        for seed, phase in enumerate(phases):
            rows.append({"run_id": f"{lr}-{wd}-{seed}", X: lr, Y: wd, "seed": seed, "phase": phase,
                         "step_val": STEPS.get(phase, np.nan)})
    df = pd.DataFrame(rows)
    df.attrs["swept"] = [X, Y, "seed"]
    return df


def cell(grid, lr, wd):
    c = grid.cells
    row = c[(c[X] == lr) & (c[Y] == wd)]
    assert len(row) == 1
    return row.iloc[0]


def test_phase_grid_majority_agreement_counts():
    df = make_runs()
    grid = phase_grid(df, X, Y)
    assert len(grid.cells) == len(LRS) * len(WDS)
    assert not grid.cells.duplicated([X, Y]).any()
    assert grid.facets == () and grid.facet_values == [()]
    assert grid.x_log and not grid.y_log
    assert grid.x_values == LRS and grid.y_values == WDS
    c = cell(grid, 1e-4, 0)
    assert (c.phase, c.agreement, c.n) == ("comprehension", pytest.approx(2 / 3), 3)
    assert (c.count_comprehension, c.count_grokking, c.count_memorization) == (2, 1, 0)
    assert c.n_generalized == 3 and c.median_steps == 100 and c.log10_steps == pytest.approx(2.0)
    assert cell(grid, 1e-3, 0).agreement == 1.0 and cell(grid, 1e-3, 0).log10_steps == pytest.approx(4.0)
    assert cell(grid, 1e-4, 1).phase == "comprehension"  # tie broken by the phase order
    assert cell(grid, 1e-3, 1).phase == "diverged"
    assert np.isnan(cell(grid, 1e-2, 1).log10_steps)
    # the diagram's counts add up to the runs' phase counts
    counts = grid.cells[[f"count_{p}" for p in PHASES]].sum()
    counts.index = [i.removeprefix("count_") for i in counts.index]
    pd.testing.assert_series_equal(counts, phase_counts(df), check_names=False)
    assert pivot(grid).loc[0, 1e-3] == "grokking"
    # what `grokray analyze` prints and the atlas tables show: the tie as a tie, the rest as their phase
    assert pivot(grid, "shown").loc[1, 1e-4] == "comprehension|grokking|memorization"
    assert pivot(grid, "shown").loc[0, 1e-4] == "comprehension"
    from analysis.pipeline import _cells_text

    assert "comprehension|grokking|memorization" in _cells_text(grid)


def test_phase_grid_facets_remaining_axes():
    a = make_runs().assign(**{"model.hidden": 200})
    b = make_runs().assign(**{"model.hidden": 50})
    df = pd.concat([a, b], ignore_index=True)
    df.attrs["swept"] = [X, Y, "model.hidden", "seed"]
    assert remaining_axes(df, (X, Y)) == ["model.hidden"]
    grid = phase_grid(df, X, Y)
    assert grid.facets == ("model.hidden",)
    assert grid.facet_values == [(50,), (200,)]
    assert len(grid.cells) == 12 and grid.cells["n"].eq(3).all()  # only seeds aggregated
    pooled = phase_grid(df, X, Y, facet=[])
    assert len(pooled.cells) == 6 and pooled.cells["n"].eq(6).all()


def test_phase_grid_ignores_unfinished_and_canonicalizes_floats():
    df = make_runs()
    df.loc[0, "phase"] = None
    df.loc[df[X] == 1e-3, X] = 0.0010000000000000002  # a logspace value that went through a string
    grid = phase_grid(df, X, Y)
    assert len(grid.cells) == 6
    assert cell(grid, 1e-4, 0).n == 2


def test_log_axis_detection():
    assert is_log_spaced([1e-4, 3.1622776601683795e-4, 1e-3, 3.1622776601683795e-3])
    assert not is_log_spaced([0, 1, 5, 10, 20])
    assert not is_log_spaced([1, 2, 3])
    assert not is_log_spaced(["a", "b", "c"])
    df = make_runs()
    df.attrs["log_axes"] = [Y]  # declared log, but wd holds 0: drawn linear
    assert not phase_grid(df, X, Y).y_log


def test_compare_with_itself_is_empty():
    df = make_runs()
    cmp = compare(df, df.copy(), X, Y)
    assert cmp.changed.empty and cmp.transitions.empty
    assert len(cmp.cells) == 6 and not cmp.cells["changed"].any()
    assert transition_lines(cmp) == []


def test_compare_finds_exactly_the_changed_cell():
    other = dict(TABLE)
    other[(1e-3, 0)] = ["comprehension", "comprehension", "grokking"]
    cmp = compare(make_runs(), make_runs(other), X, Y)
    assert len(cmp.changed) == 1
    row = cmp.changed.iloc[0]
    assert (row[X], row[Y], row.phase_a, row.phase_b) == (1e-3, 0, "grokking", "comprehension")
    assert cmp.transitions.to_dict("records") == [{"from": "grokking", "to": "comprehension", "cells": 1}]
    assert transition_lines(cmp) == ["1 cell grokking → comprehension"]


def test_compare_transition_table_counts_and_missing_cells():
    a = {k: ["grokking"] for k in itertools.product(LRS, WDS)}
    b = {k: ["comprehension"] for k in itertools.product(LRS, WDS)}
    b.pop((1e-2, 1))
    cmp = compare(make_runs(a), make_runs(b), X, Y)
    assert transition_lines(cmp) == ["5 cells grokking → comprehension"]
    assert len(cmp.only_a) == 1 and cmp.only_b.empty


def test_generalization_vs_fraction_critical_point():
    rates = {0.2: 0.0, 0.3: 0.0, 0.4: 0.25, 0.5: 0.75, 0.6: 1.0}
    rows = []
    for f, r in rates.items():
        for s in range(4):
            gen = s < round(r * 4)
            rows.append({"task.train_fraction": f, "seed": s, "phase": "grokking" if gen else "memorization",
                         "step_val": 1000 / f if gen else np.nan})
    curve = generalization_vs_fraction(pd.DataFrame(rows))
    assert curve.table["rate"].tolist() == list(rates.values())
    assert curve.critical_fraction == pytest.approx(0.45)
    assert curve.table.set_index("task.train_fraction").loc[0.5, "median_steps"] == pytest.approx(2000)


def test_runs_to_frame_from_run_records():
    def run(i, lr, wd, seed, phase, metrics):
        tags = {"grokray.phase": phase, "grokray.model": "toy", "grokray.task": "addition",
                "grokray.trial_key": f"k{i}", "grokray.pack_id": "pack0", "grokray.swept": json.dumps([X, Y, "seed"]),
                "grokray.log_axes": json.dumps([X])}
        params = {X: str(lr), Y: str(wd), "seed": str(seed), "model.activation": "tanh", "task.train_fraction": "None",
                  "model.hidden": "[200, 200]"}
        return RunRecord(f"r{i}", f"run {i}", "1", "FINISHED", i, None, params, tags, metrics, parent_id="P")

    df = runs_to_frame([
        run(0, 1e-4, 0, 0, "grokking", {"step_train_acc_0.9": 10.0, "step_val_acc_0.9": 3000.0, "grokking_gap": 2990.0,
                                         "final/val/acc": 1.0, "steps_run": 3000.0, "val/acc": 1.0}),
        run(1, 0.00031622776601683794, 1, 0, "memorization", {"step_train_acc_0.9": 10.0, "final/val/acc": 0.2}),
    ])
    assert df["run_id"].tolist() == ["r0", "r1"] and df["parent_run_id"].tolist() == ["P", "P"]
    assert list(df.columns[:6]) == ["run_id", "parent_run_id", "run_name", X, Y, "seed"]
    assert df[X].dtype == float and df[Y].dtype == np.int64 and df["seed"].dtype == np.int64
    assert df["model.activation"].tolist() == ["tanh", "tanh"]
    assert df["model.hidden"].tolist() == ["[200, 200]"] * 2
    assert df["task.train_fraction"].isna().all()
    assert df["phase"].tolist() == ["grokking", "memorization"]
    assert df["step_val"].iloc[0] == 3000 and np.isnan(df["step_val"].iloc[1])
    assert df["gap"].iloc[0] == 2990 and "val/acc" not in df  # step series are not summary columns
    assert df.attrs["swept"] == [X, Y, "seed"] and df.attrs["log_axes"] == [X]
    assert phase_grid(df, X, Y).x_log  # two values only, but the grokray.log_axes tag declares it


def test_a_swept_default_group_field_gets_its_column_back():
    """`optim.default.weight_decay` is logged as each group's own param; the swept axis must still be a column."""
    def run(i, wd):
        tags = {"grokray.phase": "grokking",
                "grokray.swept": json.dumps(["optim.default.weight_decay", "seed"])}
        params = {"optim.hidden.weight_decay": str(wd), "optim.last.weight_decay": str(wd), "seed": "0"}
        return RunRecord(f"r{i}", "", "1", "FINISHED", i, None, params, tags, {}, parent_id="P")

    df = runs_to_frame([run(0, 0.1), run(1, 3.0)])
    assert df["optim.default.weight_decay"].tolist() == [0.1, 3.0]
    assert "optim.default.weight_decay" in df.attrs["params"]
