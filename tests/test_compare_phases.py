"""benchmarks/compare_phases.py: a re-run of a figure held against its committed page, run by run and cell by cell
(what the GPU session reports against the CPU pages)."""

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from compare_phases import compare  # noqa: E402


def _runs(phases: dict, steps: dict | None = None) -> pd.DataFrame:
    rows = [{"piece": "all", "lr": lr, "wd": wd, "seed": seed, "phase": phase,
             "step_val_acc_0.9": (steps or {}).get((lr, wd, seed)), "ideal_val_acc": 1.0}
            for (lr, wd, seed), phase in phases.items()]
    return pd.DataFrame(rows)


def test_runs_and_cells_are_compared_over_what_both_ran():
    ref = {(lr, wd, s): "memorization" for lr in (1e-4, 1e-3) for wd in (0.0, 5.0) for s in (0, 1, 2)}
    ref[(1e-4, 0.0, 0)] = ref[(1e-4, 0.0, 1)] = "grokking"
    new = {k: v for k, v in ref.items() if k[2] in (0, 1)}  # a re-run of seeds 0 and 1
    new[(1e-3, 5.0, 0)] = new[(1e-3, 5.0, 1)] = "confusion"  # one cell changed for both seeds
    steps_ref = {(1e-4, 0.0, 0): 500.0, (1e-4, 0.0, 1): 800.0}
    steps_new = {(1e-4, 0.0, 0): 500.0, (1e-4, 0.0, 1): 1200.0}
    r = compare(_runs(ref, steps_ref), _runs(new, steps_new))
    assert (r["runs"], r["same_phase"], r["runs_only_in_reference"], r["runs_only_in_candidate"]) == (8, 6, 4, 0)
    assert (r["generalized_in_both"], r["same_crossing_step"]) == (2, 1)
    assert r["median_crossing_ratio"] == 1.25
    assert (r["cells"], r["same_cell_phase"]) == (4, 3)
    assert r["changed"] == [(1e-3, 5.0, "memorization", "confusion")]
