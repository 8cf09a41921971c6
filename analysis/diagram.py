"""Phase diagrams and comparisons as data: a runs DataFrame in, DataFrames/NamedTuples out. No plotting here.

The runs frame is what `analysis.load_runs` returns (one row per configuration; param columns named by their
dotted key, a `phase` column, crossing steps `step_train`/`step_val`), or any frame with those columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd

from grokray.phases import PHASES, UNDECODABLE  # UNDECODABLE: also a cell whose every split is below the threshold

__all__ = ["Comparison", "FractionCurve", "PhaseGrid", "compare", "generalization_vs_fraction", "is_log_spaced",
           "log_axes", "phase_counts", "phase_grid", "pivot", "remaining_axes", "transition_lines"]

GENERALIZED = ("comprehension", "grokking")
# Columns load_runs adds that are never sweep axes.
META = frozenset({
    "run_id", "parent_run_id", "run_name", "status", "phase", "model", "task", "trial_key", "pack_id",
    "step_train", "step_val", "gap", "steps_run", "start_time", "end_time",
})


# -- axes ----------------------------------------------------------------------------------------------------
def is_log_spaced(values: Iterable, rtol: float = 1e-3) -> bool:
    """True for >= 3 distinct positive values with a constant ratio != 1 between neighbours (a logspace)."""
    try:
        v = np.unique(np.asarray([x for x in values if pd.notna(x)], dtype=float))
    except (TypeError, ValueError):
        return False
    if len(v) < 3 or v[0] <= 0:
        return False
    ratios = v[1:] / v[:-1]
    return bool(np.allclose(ratios, ratios[0], rtol=rtol) and not np.isclose(ratios[0], 1.0))


def log_axes(df: pd.DataFrame, axes: Iterable[str], declared: Iterable[str] | None = None) -> dict[str, bool]:
    """Which of `axes` to draw on a log scale: declared log-spaced (the grokray.log_axes tag, kept by load_runs in
    df.attrs['log_axes'], or `declared`) or geometrically spaced. An axis with values <= 0 is never log."""
    declared = set(df.attrs.get("log_axes", ()) if declared is None else declared)
    out = {}
    for a in axes:
        col = pd.to_numeric(df[a], errors="coerce") if a in df else pd.Series(dtype=float)
        positive = bool(len(col.dropna())) and bool((col.dropna() > 0).all()) and not col.isna().any()
        out[a] = positive and (a in declared or is_log_spaced(col))
    return out


def remaining_axes(df: pd.DataFrame, exclude: Iterable[str] = (), seed: str = "seed") -> list[str]:
    """Swept axes other than `exclude` and the seed that take more than one value in `df` (these become facets).

    Candidates are df.attrs['swept'] when load_runs recorded it, else df.attrs['params'], else every column that is
    not a known metadata/metric column."""
    exclude = set(exclude) | {seed}
    cands = df.attrs.get("swept") or df.attrs.get("params")
    if not cands:
        cands = [c for c in df.columns if c not in META and "/" not in c and not c.startswith("step_")]
    return [c for c in cands if c in df and c not in exclude and df[c].nunique(dropna=False) > 1]


def canonical(v):
    """Equal axis values from different runs compare equal (logspace floats round-trip through strings)."""
    if isinstance(v, float | np.floating) and np.isfinite(v):
        return float(f"{float(v):.12g}")
    return v


def _sorted_unique(s: pd.Series) -> list:
    vals = list(pd.unique(s))
    try:
        return sorted(vals, key=lambda x: (pd.isna(x), x))
    except TypeError:
        return sorted(vals, key=str)


# -- phase grid ----------------------------------------------------------------------------------------------
class PhaseGrid(NamedTuple):
    """One row of `cells` per (facet..., y, x) present in the runs.

    cells columns: the facet axes, y, x, `phase` (majority; a tie goes to the earlier phase in `phases`, and says
    so in `tie`), `tie` (the top count is shared: "comprehension|memorization", else ""), `shown` (what a table
    prints for the cell: its tie when there is one, else its phase, so no tie reads as one phase), `agreement`
    (majority count / voting runs), `n` (runs aggregated, usually seeds), `count_<phase>` for every phase as the
    phase counts count them (a run on an undecodable split in `count_undecodable`, not under the phase it was
    tagged with; a divergence stays one), `vote_<phase>` over the voting ones (decodable splits), `n_undecodable`
    (runs whose
    split's ideal val accuracy is below the phase threshold: no model could reach it), `n_generalized` (runs with a
    val crossing), `median_steps` and `log10_steps` (of `steps_col` over the runs that have one; NaN when none),
    `steps` (the median over the cell's decodable runs with a run that never crossed counted as never: so one fast
    seed and two that fail give "never", NaN, not the fast seed's steps) and `share_generalized` (of those runs).
    """

    cells: pd.DataFrame
    x: str
    y: str
    facets: tuple[str, ...]
    x_log: bool
    y_log: bool
    x_values: list
    y_values: list
    facet_values: list[tuple]
    phases: tuple[str, ...]
    steps_col: str


def phase_order(df: pd.DataFrame) -> tuple[str, ...]:
    extra = sorted(set(df["phase"].dropna()) - set(PHASES))
    return tuple(PHASES) + tuple(extra)


def phase_grid(df: pd.DataFrame, x: str, y: str, facet: str | Sequence[str] | None = None, *,
               log: Iterable[str] | None = None, steps: str = "step_val", seed: str = "seed") -> PhaseGrid:
    """Aggregate runs into phase-diagram cells over axes x and y.

    facet: the axes that split the diagram into panels. None (default) facets by every other swept axis that
    varies, so runs are only ever aggregated over seeds; pass [] to aggregate over everything but x and y.
    log: axes declared log-spaced (default df.attrs['log_axes']); geometric spacing is detected anyway.
    Runs without a phase (unfinished) are left out.
    """
    for a in (x, y):
        if a not in df:
            raise KeyError(f"axis {a!r} is not a column; columns: {sorted(map(str, df.columns))}")
    if facet is None:
        facets = tuple(remaining_axes(df, exclude=(x, y), seed=seed))
    else:
        facets = (facet,) if isinstance(facet, str) else tuple(facet)
    keys = [*facets, y, x]
    for a in keys:
        if a not in df:
            raise KeyError(f"facet {a!r} is not a column")
    # only the columns read below: a copy of every column is the frame again (18 MB at 10^5 runs, in the close)
    used = [c for c in dict.fromkeys([*keys, "phase", steps, *UNDECODABLE_COLUMNS]) if c in df]
    runs = df.loc[df["phase"].notna(), used]
    runs.attrs = {}  # pandas deep-copies attrs on every operation: 14 of 48 s at 10^5 runs
    for a in keys:
        runs[a] = runs[a].map(canonical)
    phases = phase_order(df)
    st = pd.to_numeric(runs[steps], errors="coerce") if steps in runs else pd.Series(np.nan, index=runs.index)
    runs["_steps"] = st.where(np.isfinite(st))
    runs["_undecodable"] = undecodable(runs)
    rows = [_cell_row(keys, key, phases, *arrays) for key, arrays in _cells_of(runs, keys, phases)]
    cols = [*keys, "phase", "tie", "agreement", "n", "n_undecodable", "count_undecodable", "n_generalized",
            "median_steps", "log10_steps", "steps", "share_generalized", *(f"count_{p}" for p in phases),
            *(f"vote_{p}" for p in phases)]
    cells = pd.DataFrame(rows, columns=cols)
    cells.insert(cols.index("tie") + 1, "shown",
                 [t or p for t, p in zip(cells["tie"], cells["phase"], strict=True)])
    cells = cells.sort_values(keys, kind="stable", key=_sort_key).reset_index(drop=True)
    is_log = log_axes(runs, [x, y], declared=df.attrs.get("log_axes", ()) if log is None else log)
    facet_values = (list(dict.fromkeys(map(tuple, cells[list(facets)].itertuples(index=False, name=None))))
                    if facets else [()])
    return PhaseGrid(cells, x, y, facets, is_log[x], is_log[y], _sorted_unique(cells[x]),
                     _sorted_unique(cells[y]), facet_values, phases, steps)




def _cells_of(runs: pd.DataFrame, keys: list[str], phases: tuple[str, ...]):
    """(cell key, (phase index, undecodable, steps) arrays of its runs) for every cell, in order of first
    appearance: one grouping pass into integer codes and numpy arrays, where a pandas Series per cell cost ~5 ms
    and ~8 KB each (10^4 cells at 10^5 runs)."""
    if not len(runs):
        return
    codes = runs.groupby(keys, dropna=False, sort=False).ngroup().to_numpy()
    index = {p: i for i, p in enumerate(phases)}
    phase = np.fromiter((index.get(v, -1) for v in runs["phase"]), dtype=np.int64, count=len(runs))
    undec = runs["_undecodable"].to_numpy(dtype=bool)
    steps = runs["_steps"].to_numpy(dtype=float)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    key_rows = runs[keys].itertuples(index=False, name=None)
    first_at: dict[int, tuple] = {}  # each cell's key, as its first run has it
    for code, key in zip(codes.tolist(), key_rows, strict=True):
        first_at.setdefault(code, key)
    for members in np.split(order, bounds):
        yield first_at[int(codes[members[0]])], (phase[members], undec[members], steps[members])


def _cell_row(keys: list[str], key: tuple, phases: tuple[str, ...], phase: np.ndarray, undec: np.ndarray,
              steps: np.ndarray) -> dict:
    """One cell's row: counts of every phase, the majority over the seeds whose split can reach the threshold
    (a cell of undecodable splits has no phase to show, and says so), and its steps."""
    k = len(phases)
    decodable = ~undec
    diverged = phase == (phases.index("diverged") if "diverged" in phases else -2)
    counted = decodable | diverged  # as the phase counts count them (grokray.phases.counted_phase)
    c = np.bincount(phase[counted & (phase >= 0)], minlength=k)
    votes = np.bincount(phase[decodable & (phase >= 0)], minlength=k)
    total, best = int(votes.sum()), int(votes.max())
    top = [p for p, v in zip(phases, votes, strict=True) if total and v == best]
    finite = steps[~np.isnan(steps)]
    m = float(np.median(finite)) if len(finite) else np.nan
    voters = steps[decodable]
    censored = float(np.median(np.where(np.isnan(voters), np.inf, voters))) if len(voters) else np.inf
    row = dict(zip(keys, key, strict=True))
    row.update(phase=phases[int(np.argmax(votes))] if total else UNDECODABLE, tie="|".join(top) if len(top) > 1
               else "", agreement=float(best) / total if total else 1.0, n=int((phase >= 0).sum()),
               n_undecodable=int(undec.sum()), n_generalized=len(finite),
               count_undecodable=int((undec & ~diverged & (phase >= 0)).sum()),
               median_steps=m, log10_steps=float(np.log10(max(m, 1.0))) if not np.isnan(m) else np.nan,
               steps=censored if np.isfinite(censored) else np.nan,
               share_generalized=float((~np.isnan(voters)).mean()) if len(voters) else np.nan)
    row.update({f"count_{p}": int(c[i]) for i, p in enumerate(phases)})
    row.update({f"vote_{p}": int(votes[i]) for i, p in enumerate(phases)})
    return row


UNDECODABLE_COLUMNS = ("ideal_val_acc", "phases.threshold")  # what undecodable reads (phase_grid keeps them)


def undecodable(runs: pd.DataFrame, threshold: float = 0.9) -> pd.Series:
    """Runs whose split cannot reach the phase threshold on validation (their `ideal_val_acc`, Liu's ideal
    accuracy, logged for addition tasks, is below it): memorization there says nothing about the model."""
    if "ideal_val_acc" not in runs:
        return pd.Series(False, index=runs.index)
    thr = pd.to_numeric(runs["phases.threshold"], errors="coerce").fillna(threshold) \
        if "phases.threshold" in runs else threshold
    return pd.to_numeric(runs["ideal_val_acc"], errors="coerce") < thr


def _sort_key(s: pd.Series) -> pd.Series:
    num = pd.to_numeric(s, errors="coerce")
    return num if num.notna().all() else s.astype(str)


def pivot(grid: PhaseGrid, value: str = "phase", facet_value: tuple = ()) -> pd.DataFrame:
    """A y-by-x table of one cell column (phase, agreement, log10_steps, ...) for one facet: for printing."""
    cells = grid.cells
    for k, v in zip(grid.facets, facet_value, strict=True):
        cells = cells[cells[k] == v]
    return cells.pivot(index=grid.y, columns=grid.x, values=value).reindex(index=grid.y_values,
                                                                            columns=grid.x_values)


def phase_counts(df: pd.DataFrame) -> pd.Series:
    """Runs per phase, every phase listed (zeros included), in the fixed phase order; runs on an undecodable split
    count as such (grokray.phases.counted_phase), listed only when there are some."""
    phases = phase_order(df)
    phase = df["phase"].mask(undecodable(df) & (df["phase"] != "diverged"), UNDECODABLE)
    order = list(phases) + ([UNDECODABLE] if (phase == UNDECODABLE).any() else [])
    return phase.value_counts().reindex(order, fill_value=0).astype(int).rename("runs")


# -- comparison ----------------------------------------------------------------------------------------------
class Comparison(NamedTuple):
    """grid_a / grid_b: the two diagrams; cells: the outer join of their cells on (facets, y, x) with phase_a,
    phase_b, agreement_a, agreement_b, n_a, n_b and `changed`; changed: the cells present in both whose majority
    phase differs; transitions: (from, to, cells) counts of the changes, most frequent first; only_a / only_b:
    cells present in one experiment only."""

    grid_a: PhaseGrid
    grid_b: PhaseGrid
    cells: pd.DataFrame
    changed: pd.DataFrame
    transitions: pd.DataFrame
    only_a: pd.DataFrame
    only_b: pd.DataFrame


def compare(df_a: pd.DataFrame, df_b: pd.DataFrame, x: str, y: str, facet: str | Sequence[str] | None = None, *,
            log: Iterable[str] | None = None, seed: str = "seed") -> Comparison:
    """Cells whose majority phase differs between two experiments (or parent runs) sharing the axes x, y."""
    if facet is None:
        facet = list(dict.fromkeys(remaining_axes(df_a, (x, y), seed) + remaining_axes(df_b, (x, y), seed)))
    facets = [facet] if isinstance(facet, str) else list(facet)
    for name, d in (("a", df_a), ("b", df_b)):
        missing = [k for k in [x, y, *facets] if k not in d]
        if missing:
            raise KeyError(f"experiment {name} lacks the axes {missing}")
    ga = phase_grid(df_a, x, y, facets, log=log, seed=seed)
    gb = phase_grid(df_b, x, y, facets, log=log, seed=seed)
    keys = [*facets, y, x]
    keep = ["phase", "agreement", "n"]
    cells = ga.cells[keys + keep].merge(gb.cells[keys + keep], on=keys, how="outer", suffixes=("_a", "_b"),
                                        indicator=True)
    both = cells["_merge"] == "both"
    cells["changed"] = both & (cells["phase_a"] != cells["phase_b"])
    only_a = cells[cells["_merge"] == "left_only"].drop(columns="_merge").reset_index(drop=True)
    only_b = cells[cells["_merge"] == "right_only"].drop(columns="_merge").reset_index(drop=True)
    cells = cells.drop(columns="_merge")
    changed = cells[cells["changed"]].reset_index(drop=True)
    if len(changed):
        transitions = (changed.groupby(["phase_a", "phase_b"]).size().rename("cells").reset_index()
                       .rename(columns={"phase_a": "from", "phase_b": "to"})
                       .sort_values(["cells", "from", "to"], ascending=[False, True, True]).reset_index(drop=True))
    else:
        transitions = pd.DataFrame({"from": pd.Series(dtype=str), "to": pd.Series(dtype=str),
                                    "cells": pd.Series(dtype=int)})
    return Comparison(ga, gb, cells, changed, transitions, only_a, only_b)


def transition_lines(comparison: Comparison) -> list[str]:
    """Human lines for the transition table: '12 cells grokking → comprehension'."""
    t = comparison.transitions
    return [f"{n} cell{'s' if n != 1 else ''} {a} → {b}"
            for a, b, n in zip(t["from"], t["to"], t["cells"], strict=True)]


# -- grokking time against data fraction ---------------------------------------------------------------------
class FractionCurve(NamedTuple):
    """table: one row per fraction (per `by` group) with n, n_generalized, rate (share of runs in a generalizing
    phase), median_steps, q25_steps, q75_steps (of `steps` over generalizing runs).
    critical_fraction: where rate first reaches `level` (linear interpolation), per group when `by` is set."""

    table: pd.DataFrame
    fraction: str
    critical_fraction: float | dict
    level: float


def crossing(fr: np.ndarray, rate: np.ndarray, level: float) -> float:
    """Where `rate` first reaches `level` along `fr` (linear interpolation); NaN when it never does."""
    for k in range(len(fr)):
        if rate[k] >= level:
            if k == 0:
                return float(fr[0])
            f0, f1, r0, r1 = fr[k - 1], fr[k], rate[k - 1], rate[k]
            return float(f0 + (level - r0) * (f1 - f0) / (r1 - r0))
    return float("nan")


def generalization_vs_fraction(df: pd.DataFrame, fraction: str = "task.train_fraction", *, steps: str = "step_val",
                               generalized: Sequence[str] = GENERALIZED, level: float = 0.5,
                               by: str | None = None, reached: str | None = None) -> FractionCurve:
    """Generalization rate and time-to-generalize against training-data fraction (Liu et al. Fig. 4b, 5b; Power
    et al.). The critical fraction is where the rate of generalizing runs crosses `level`. reached: count a run
    when this column holds a step instead (Liu's representation measure: reached="step_rqi_0.95", steps the same
    column gives P(RQI > 0.95) and the steps to it, Fig. 4)."""
    runs = df[df["phase"].notna()].copy()
    runs["_gen"] = pd.to_numeric(runs[reached], errors="coerce").notna() if reached else \
        runs["phase"].isin(list(generalized))
    runs["_steps"] = pd.to_numeric(runs[steps], errors="coerce").where(runs["_gen"]) if steps in runs else np.nan
    runs[fraction] = pd.to_numeric(runs[fraction])
    groups = [by, fraction] if by else [fraction]
    g = runs.groupby(groups)
    table = pd.DataFrame({
        "n": g.size(), "n_generalized": g["_gen"].sum().astype(int), "rate": g["_gen"].mean(),
        "median_steps": g["_steps"].median(), "q25_steps": g["_steps"].quantile(0.25),
        "q75_steps": g["_steps"].quantile(0.75),
    }).reset_index()
    if by:
        crit = {k: crossing(t[fraction].to_numpy(), t["rate"].to_numpy(), level) for k, t in table.groupby(by)}
    else:
        crit = crossing(table[fraction].to_numpy(), table["rate"].to_numpy(), level)
    return FractionCurve(table, fraction, crit, level)
