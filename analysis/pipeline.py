"""What `grokray analyze` does, as a library call: load the runs of an experiment (or one parent run), draw its
phase diagram and steps heatmap, optionally compare it with another experiment / parent run and compute
representation metrics from saved final states, write everything to a directory and log it on the parent run.

`analyze` returns the data (an `Analysis`); `phase_table_text` / `summary_lines` make the printed tables.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from grokray.tracking.schema import ANALYSIS_DIR

from . import plots
from .artifacts import EMBEDDINGS, load_states, representation_metrics
from .diagram import Comparison, PhaseGrid, compare, phase_counts, phase_grid, pivot, transition_lines
from .errors import AXES, COMPARED, COMPARISON, POOL, SOURCE, AnalysisError, X, Y
from .labels import runs_subtitle, step_unit
from .launches import LaunchRead, MixedLaunches, counted_once, differences, launches_read, pool_differences
from .launches import launch_label as label_of
from .load import load_runs, open_store, parent_runs
from .plots_diagram import plot_comparison, plot_phase_diagram, plot_steps_heatmap
from .representations import agop_image, pca

__all__ = ["Analysis", "MixedLaunches", "analyze", "default_axes", "phase_table_text", "summary_lines"]

ARTIFACT_DIR = ANALYSIS_DIR  # where the files go among the parent run's artifacts
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


class Analysis(NamedTuple):
    runs: pd.DataFrame
    grid: PhaseGrid
    counts: pd.Series  # runs per phase (every phase listed)
    parent_run_id: str | None  # the run the files were logged on (None when not logged)
    files: list[Path]
    comparison: Comparison | None = None
    other_label: str | None = None
    representations: pd.DataFrame | None = None
    read: list[LaunchRead] | tuple = ()  # the launches this analysis read (latest first)
    other_read: list[LaunchRead] | tuple = ()  # and those it compared them with
    mixed: list[str] | tuple = ()  # how they differ, where told to mix them


def default_axes(df: pd.DataFrame, x: str | None = None, y: str | None = None) -> tuple[str, str]:
    """x and y for the diagram: the given ones, else the swept axes in spec order (varying ones first; the seed
    only when nothing else is left). Raises ValueError naming the axes there are."""
    swept = [a for a in df.attrs.get("swept") or df.attrs.get("params") or [] if a in df]
    for part, axis in ((X, x), (Y, y)):
        if axis is not None and axis not in df:
            raise AnalysisError(part, f"{axis!r} is not a parameter of these runs; swept axes: {swept}")
    swept = [a for a in swept if df[a].notna().any()]  # a parameter no run set (None) is no axis
    cands = [a for a in swept if a != "seed" and df[a].nunique(dropna=False) > 1]
    cands += [a for a in swept if a != "seed" and a not in cands]
    if "seed" in df:
        cands.append("seed")
    cands = [a for a in cands if a not in (x, y)]
    x = x or (cands.pop(0) if cands else None)
    y = y or (cands.pop(0) if cands else None)
    if x is None or y is None or x == y:
        raise AnalysisError(AXES, f"need two different axes for a phase diagram; swept axes: {swept}; name x and y")
    return x, y


def _load(which: str, tracking_uri: str | None) -> pd.DataFrame:
    """An experiment name (its latest parent run) or a parent run id."""
    if _RUN_ID.match(which):
        try:
            return load_runs(parent_run_id=which, tracking_uri=tracking_uri)
        except Exception:  # noqa: BLE001 - not a run id after all: try it as an experiment name
            pass
    return load_runs(which, tracking_uri=tracking_uri, latest_parent=True)


def _label(which: str, tracking_uri: str | None = None) -> str:
    return which if not _RUN_ID.match(which) else launch_label(which, tracking_uri)


def launch_label(parent_run_id: str, tracking_uri: str | None) -> str:
    """A launch named as a reader knows it: its spec (the parent's name, e.g. "quickstart sweep") and when it
    started; the run id only where the store cannot say."""
    try:
        return label_of(open_store(tracking_uri).run(parent_run_id))
    except Exception:  # noqa: BLE001 - a title is no reason to fail an analysis
        return f"run {parent_run_id[:8]}"


def phase_table_text(counts: pd.Series) -> str:
    total = int(counts.sum())
    lines = [f"{'phase':<18} {'runs':>5} {'share':>6}"]
    lines += [f"{p:<18} {int(n):>5} {n / max(total, 1):>6.0%}" for p, n in counts.items() if n > 0]
    lines.append(f"{'total':<18} {total:>5}")
    return "\n".join(lines)


def _cells_text(grid: PhaseGrid) -> str:
    out = []
    for fv in grid.facet_values:
        table = pivot(grid, "shown", fv).astype(object).fillna("-")  # a tie as a|b; a missing cell as -
        head = ", ".join(f"{k}={v}" for k, v in zip(grid.facets, fv, strict=True))
        out.append((f"[{head}]\n" if head else "") + f"rows {grid.y}, columns {grid.x}\n" + table.to_string())
    return "\n\n".join(out)


def summary_lines(result: Analysis) -> list[str]:
    """The text `grokray analyze` prints: phase table, the majority phase per cell, the comparison."""
    lines = [f"read: {launch.describe()}" for launch in result.read]
    lines += [launch.left_running for launch in [*result.read, *result.other_read] if launch.left_running]
    lines += [f"compared with: {launch.describe()}" for launch in result.other_read]
    lines += [f"MIXED (told to mix them): {d}" for d in result.mixed]
    lines += ["" if lines else None, phase_table_text(result.counts), "", _cells_text(result.grid)]
    lines = [line for line in lines if line is not None]
    if result.comparison is not None:
        trans = transition_lines(result.comparison)
        lines += ["", f"compared with {result.other_label}: "
                  + (f"{len(result.comparison.changed)} cell(s) changed" if trans else "no phase changed")]
        lines += [f"  {t}" for t in trans]
        if len(result.comparison.only_a) or len(result.comparison.only_b):
            lines.append(f"  cells in one experiment only: {len(result.comparison.only_a)} here, "
                         f"{len(result.comparison.only_b)} there")
    if result.representations is not None:
        reps = result.representations
        if reps.empty:
            lines += ["", "representations: no run has a final_state.pt artifact "
                      "(set `artifacts: {final_state: true}` in the spec)"]
        else:
            cols = [c for c in reps.columns[reps.notna().any()] if c not in ("run_id",)
                    and c in ("rqi", "pca_entropy", "pca_top_ratio", "fourier_top_fraction",
                              "agop_circulant_distance")]
            lines += ["", f"representations ({len(reps)} runs), mean per phase:",
                      reps.groupby("phase")[cols].mean().round(3).to_string() if cols else "(no metric applies)"]
    return lines


def _state_figures(df: pd.DataFrame, states: dict, out: Path, limit: int) -> list[Path]:
    """AGOP images (rfm) or embedding PCA plots of a few runs with saved states: one per phase first."""

    have = df[df["run_id"].isin(list(states))]
    picked = list(have.drop_duplicates("phase")["run_id"])
    picked += [r for r in have["run_id"] if r not in picked]
    files: list[Path] = []
    for run_id in picked[:limit]:
        row = have[have["run_id"] == run_id].iloc[0]
        state, p = states[run_id], row.get("task.p")
        p = int(p) if p is not None and pd.notna(p) else None
        title = f"{row.get('run_name') or run_id[:8]}\n{row['phase']}"
        name = out / f"state_{row['phase']}_{run_id[:8]}"
        param = EMBEDDINGS.get(row.get("model") or "")
        if "M" in state:
            fig = plots.plot_agop(agop_image(state["M"]), p=p, title=f"AGOP: {title}")
        elif param in state:
            emb = state[param][:p] if p else state[param]
            res = pca(emb)
            fig = plots.plot_embedding_pca(res.projected, explained=res.explained_variance_ratio,
                                           title=f"embeddings: {title}")
        else:
            continue
        files += plots.save_figure(fig, name)
    return files


def analyze(out_dir: str | Path, experiment: str | None = None, parent_run_id: str | None = None,
            x: str | None = None, y: str | None = None, compare_to: str | None = None,
            tracking_uri: str | None = None, representations: bool = False, log: bool = True,
            all_parents: bool = False, max_figures: int = 4, narrow: bool = False,
            runs: pd.DataFrame | None = None, title: str | None = None, mixed: bool = False) -> Analysis:
    """Write phase_diagram.{png,svg}, steps_heatmap.{png,svg}, phase_table.txt and cells.csv (and with
    compare_to: comparison.{png,svg}, transitions.csv, changed_cells.csv; with representations:
    representations.csv and, for up to max_figures runs (one per phase first), state_<phase>_<run>.{png,svg}: the
    AGOP image for rfm, the embeddings' PCA otherwise) into out_dir, and log them under `analysis/` on the parent run.

    experiment: its latest parent run's configurations (all parents with all_parents=True; then the files are
    logged on the latest parent). parent_run_id: that `grokray run` (wins over experiment).
    compare_to: another experiment name (its latest parent) or a parent run id.
    narrow: read only the columns the figures need (and x, y), a launch's runs streamed: a 10^5-run launch is
    then ~0.2 KB a run, not every param and metric of every run (~1 GB). Analysis.runs is then narrow.
    runs: the parent's children already in hand (runs_to_frame's frame; a launch's close builds it as it counts
    them): nothing is read.
    mixed: compare or pool launches of different budgets, thresholds or seeds (else MixedLaunches); the
    differences are then in Analysis.mixed. A pool counts a configuration two launches trained once.
    """

    if runs is None:
        df, parent_run_id = _read_runs(experiment, parent_run_id, tracking_uri, all_parents, narrow,
                                       [a for a in (x, y) if a])
    else:
        df = runs
    read = launches_read(df, tracking_uri) if runs is None else []
    told: list[str] = []
    if len(read) > 1:  # a pool (all_parents): one setup, each configuration once
        told += _allowed(MixedLaunches(POOL, "the pool of every launch", pool_differences(read)), mixed)
        df = counted_once(df)
    x, y = default_axes(df, x, y)
    name = title or experiment or launch_label(parent_run_id, tracking_uri)
    comparison = other_label = None
    other_read: list[LaunchRead] = []
    if compare_to is not None:  # read and judged before a file is written: a bad --compare leaves nothing
        other, other_label, other_read = _compared(compare_to, tracking_uri)
        told += _allowed(MixedLaunches(COMPARISON, f"the comparison with {other_label}",
                                       differences(read, other_read)), mixed)
        comparison = compare(df, other, x, y)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    grid, counts, files = _diagram_files(df, x, y, name, out)
    if comparison is not None:
        sides = (_side(name, read), _side(other_label, other_read))
        files += _comparison_files(comparison, sides, out, mixed=told)

    reps = None
    if representations:
        reps, more = _representation_files(df, tracking_uri, out, max_figures)
        files += more

    parent = parent_run_id or _logged_on(df, experiment, tracking_uri)
    if log and parent is not None:
        store = open_store(tracking_uri)
        for f in files:
            store.log_artifact(parent, f, ARTIFACT_DIR)
    return Analysis(df, grid, counts, parent if log else None, files, comparison, other_label, reps, read,
                    other_read, told)


def _read_runs(experiment: str | None, parent_run_id: str | None, tracking_uri: str | None, all_parents: bool,
               narrow: bool, axes: list[str]) -> tuple[pd.DataFrame, str | None]:
    """The runs analyze draws, from a parent run (its whole id, where the user gave the first characters) or an
    experiment's latest parent (or all of them); a narrow read keeps the axes the user names."""
    if parent_run_id is not None:
        df = load_runs(parent_run_id=parent_run_id, tracking_uri=tracking_uri, narrow=narrow, keep=axes)
        parent_run_id = df.attrs["parent_run_id"]
    elif experiment is not None:
        df = load_runs(experiment, tracking_uri=tracking_uri, latest_parent=not all_parents, narrow=narrow,
                       keep=axes)
    else:
        raise AnalysisError(SOURCE, "give an experiment or a parent run id")
    if df.empty or df["phase"].notna().sum() == 0:
        raise AnalysisError(SOURCE, f"no finished configurations in {parent_run_id or experiment!r} (no phase tags)")
    return df, parent_run_id


def _diagram_files(df: pd.DataFrame, x: str, y: str, name: str, out: Path) -> tuple[PhaseGrid, pd.Series, list[Path]]:
    """The phase diagram, the steps heatmap, the phase table and the cells, written into out."""
    grid = phase_grid(df, x, y)
    counts = phase_counts(df)
    subtitle, unit = runs_subtitle(df), step_unit(df)
    files = plots.save_figure(plot_phase_diagram(grid, title=f"{name}: phase diagram", subtitle=subtitle),
                              out / "phase_diagram")
    files += plots.save_figure(plot_steps_heatmap(grid, title=f"{name}: {unit} to generalize", subtitle=subtitle,
                                                  unit=unit), out / "steps_heatmap")
    (out / "phase_table.txt").write_text(phase_table_text(counts) + "\n\n" + _cells_text(grid) + "\n")
    grid.cells.to_csv(out / "cells.csv", index=False)
    return grid, counts, [*files, out / "phase_table.txt", out / "cells.csv"]


def _compared(compare_to: str, tracking_uri: str | None) -> tuple[pd.DataFrame, str, list[LaunchRead]]:
    """The launch to compare with: its runs, its label and what was read (AnalysisError COMPARED if it cannot be
    read: --compare's input, not the analysed launch's)."""
    try:
        other = _load(compare_to, tracking_uri)
    except (KeyError, ValueError) as exc:
        raise AnalysisError(COMPARED, str(exc).strip("'\"")) from None
    return other, _label(compare_to, tracking_uri), launches_read(other, tracking_uri)


def _logged_on(df: pd.DataFrame, experiment: str | None, tracking_uri: str | None) -> str | None:
    """The parent run an experiment's analysis is logged on: its one launch, else the latest."""
    ids = list(df["parent_run_id"].dropna().unique())
    return ids[0] if len(ids) == 1 else (parent_runs(experiment, tracking_uri)["run_id"].iloc[0] if ids else None)


def _side(label: str, read: list[LaunchRead]) -> str:
    """A comparison's side as its reader knows it: the one launch's spec and start (two launches of one spec
    both carried the spec's name), else the experiment's name."""
    return read[0].label if len(read) == 1 else label


def _comparison_files(comparison: Comparison, labels: tuple[str, str], out: Path, mixed: list[str]) -> list[Path]:
    """comparison.{png,svg}, transitions.csv and changed_cells.csv; `mixed` marks a comparison told to mix."""
    files = plots.save_figure(plot_comparison(comparison, labels=labels, mixed=mixed), out / "comparison")
    comparison.transitions.to_csv(out / "transitions.csv", index=False)
    comparison.changed.to_csv(out / "changed_cells.csv", index=False)
    return [*files, out / "transitions.csv", out / "changed_cells.csv"]


def _representation_files(df: pd.DataFrame, tracking_uri, out: Path, max_figures: int):
    """(representation metrics, files): representations.csv and the state figures of runs that saved one."""
    states = load_states(df["run_id"], tracking_uri)
    reps = representation_metrics(df, tracking_uri, states=states)
    if reps.empty:
        return reps, []
    reps.to_csv(out / "representations.csv", index=False)
    return reps, [out / "representations.csv", *_state_figures(df, states, out, max_figures)]


def _allowed(problem: MixedLaunches, mixed: bool) -> list[str]:
    """The differences, where told to mix; MixedLaunches where there are some and it was not."""
    if problem.differences and not mixed:
        raise problem
    return problem.differences
