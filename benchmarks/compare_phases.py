"""Two atlas data CSVs of the same figure, run by run and cell by cell: how many runs got the same phase (and the
same crossing steps), and how many cells show the same majority phase. For a figure re-run on another device (the
GPU's page against the committed CPU page) or under other code.

    python3 benchmarks/compare_phases.py docs/atlas/data/quickstart-reduced.csv gpu/atlas/data/quickstart-reduced.csv

Runs are matched on the figure's axes and seed (the axes are the CSV's columns between `piece` and `seed`), and
cells are compared over the matched runs alone, so a re-run of some seeds is held against those seeds.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from analysis.diagram import phase_grid

STEP = "step_val_acc_0.9"


def axes_of(df: pd.DataFrame) -> list[str]:
    cols = list(df.columns)
    return cols[cols.index("piece") + 1: cols.index("seed")]


def compare(reference: pd.DataFrame, candidate: pd.DataFrame) -> dict:
    """Agreement of two figures' runs and cells (a dict of counts, printable as a table row)."""
    axes = axes_of(reference)
    if axes != axes_of(candidate):
        raise ValueError(f"different axes: {axes} against {axes_of(candidate)}")
    keys = [*axes, "seed"]
    runs = reference.merge(candidate, on=keys, suffixes=("_ref", "_new"))
    same_phase = runs["phase_ref"] == runs["phase_new"]
    a, b = runs[f"{STEP}_ref"], runs[f"{STEP}_new"]
    both = a.notna() & b.notna()
    out = {"runs": len(runs), "runs_only_in_reference": len(reference) - len(runs),
           "runs_only_in_candidate": len(candidate) - len(runs), "same_phase": int(same_phase.sum()),
           "generalized_in_both": int(both.sum()), "same_crossing_step": int((both & (a == b)).sum()),
           "median_crossing_ratio": float(np.median(b[both] / a[both])) if both.any() else float("nan")}
    x, y = axes[0], axes[1] if len(axes) > 1 else axes[0]
    matched = runs[keys]  # cells are compared over the runs both have (a re-run of some seeds: those seeds)
    grids = [phase_grid(df.merge(matched, on=keys).rename(columns={STEP: "step_val"}), x, y, facet=axes[2:]).cells
             for df in (reference, candidate)]
    cells = grids[0].merge(grids[1], on=[*axes[2:], y, x], suffixes=("_ref", "_new"))
    out.update(cells=len(cells), same_cell_phase=int((cells["shown_ref"] == cells["shown_new"]).sum()))
    out["changed"] = [(row[x], row[y], row["shown_ref"], row["shown_new"])
                      for _, row in cells[cells["shown_ref"] != cells["shown_new"]].iterrows()]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reference", help="the atlas data CSV to compare against (e.g. the committed CPU page's)")
    parser.add_argument("candidate", help="the re-run's data CSV")
    args = parser.parse_args()
    r = compare(pd.read_csv(args.reference), pd.read_csv(args.candidate))
    print(f"runs: {r['same_phase']} of {r['runs']} matched runs have the same phase "
          f"({r['runs_only_in_reference']} only in the reference, {r['runs_only_in_candidate']} only in the re-run)")
    print(f"crossings: {r['same_crossing_step']} of {r['generalized_in_both']} runs that generalized in both crossed "
          f"at the same step (median ratio re-run/reference {r['median_crossing_ratio']:.3f})")
    print(f"cells: {r['same_cell_phase']} of {r['cells']} cells show the same majority phase")
    for x, y, ref, new in r["changed"]:
        print(f"  changed cell ({x:g}, {y:g}): {ref} -> {new}")
    return 0 if r["runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
