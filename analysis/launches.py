"""Which launches an analysis read, and whether they may be compared or pooled.

Phases are only comparable under one setup: a 300-step smoke launch calls "confusion" what a 5,000-step sweep
calls "grokking", and a cell voted by one seed is not a cell voted by three. So `analyze` names every launch it
read (spec, start, runs, budget, threshold, seeds), refuses a comparison or a pool whose launches differ in
those (MixedLaunches) unless told to mix them, and counts a configuration that two pooled launches both trained
once (the later run).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd

from grokray.tracking.drivers import left_by_dead_driver

from .errors import AnalysisError
from .load import open_store

SETUP = {"phases.budget": "budget", "train.steps": "train.steps", "phases.threshold": "threshold"}


class MixedLaunches(AnalysisError):
    """A comparison or a pool (`part`) of launches trained under different setups; `differences` says how."""

    def __init__(self, part: str, what: str, differences: list[str]):
        super().__init__(part, f"{what} mixes launches trained differently: {'; '.join(differences)}")
        self.differences = differences


@dataclass(frozen=True)
class LaunchRead:
    parent_run_id: str
    label: str  # spec and start, as a reader knows the launch
    runs: int
    setup: dict  # {"budget": (5000,), "threshold": (0.9,), ...}: the values its runs have
    seeds: tuple
    left_running: str = ""  # the line for a launch a dead driver left RUNNING (tracking.drivers.left_by_dead_driver)

    def describe(self) -> str:
        values = ", ".join(f"{name} {'/'.join(f'{v:g}' for v in vals)}" for name, vals in self.setup.items() if vals)
        seeds = ", ".join(str(s) for s in self.seeds) or "-"
        return (f"{self.label} (parent {self.parent_run_id[:8]}): {self.runs} runs, {values}, "
                f"seed{'s' * (len(self.seeds) != 1)} {seeds}")


def _values(df: pd.DataFrame, column: str) -> tuple:
    if column not in df:
        return ()
    return tuple(sorted(float(v) for v in pd.to_numeric(df[column], errors="coerce").dropna().unique()))


def launch_label(run) -> str:
    """A launch named as a reader knows it: its spec (the parent's name, e.g. "quickstart sweep") and when it
    started."""
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.start_ms / 1e3)) if run.start_ms else ""
    return f"{run.name} {started}".strip()


def launches_read(df: pd.DataFrame, tracking_uri: str | None) -> list[LaunchRead]:
    """One LaunchRead per parent run in the frame, latest first."""
    ids = [p for p in df["parent_run_id"].dropna().unique()] if "parent_run_id" in df else []
    store = open_store(tracking_uri) if ids else None
    out = []
    for pid in ids:
        rows = df[df["parent_run_id"] == pid]
        try:
            run = store.run(pid)
            label, start_ms, left = launch_label(run), run.start_ms or 0, left_by_dead_driver(run) or ""
        except Exception:  # noqa: BLE001 - a name is no reason to fail an analysis
            label, start_ms, left = f"run {pid[:8]}", 0, ""
        seeds = tuple(sorted(int(s) for s in pd.to_numeric(rows.get("seed", pd.Series(dtype=float)),
                                                            errors="coerce").dropna().unique()))
        setup = {name: _values(rows, col) for col, name in SETUP.items()}
        out.append((start_ms, LaunchRead(pid, label, len(rows), setup, seeds, left)))
    return [launch for _, launch in sorted(out, key=lambda pair: pair[0], reverse=True)]


def differences(a: list[LaunchRead], b: list[LaunchRead]) -> list[str]:
    """How two groups of launches differ in setup or seeds (empty: they may be compared)."""
    out = []
    for name in SETUP.values():
        va = sorted({v for launch in a for v in launch.setup.get(name, ())})
        vb = sorted({v for launch in b for v in launch.setup.get(name, ())})
        if va and vb and va != vb:
            out.append(f"{name} {'/'.join(f'{v:g}' for v in va)} against {'/'.join(f'{v:g}' for v in vb)}")
    sa, sb = sorted({s for launch in a for s in launch.seeds}), sorted({s for launch in b for s in launch.seeds})
    if sa != sb:
        out.append(f"seeds {sa} against {sb}")
    return out


def pool_differences(launches: list[LaunchRead]) -> list[str]:
    """How the launches of one pool differ from the latest of them (empty: one setup)."""
    return sorted({d for launch in launches[1:] for d in differences(launches[:1], [launch])})


def counted_once(df: pd.DataFrame) -> pd.DataFrame:
    """A pool's runs with each configuration (trial key) once: the latest launch's run, which the frame lists
    first (load_runs reads launches latest first; a start_time column decides where there is one)."""
    if "trial_key" not in df or df["trial_key"].isna().all():
        return df
    if "start_time" in df:
        df = df.sort_values("start_time", ascending=False, kind="stable")
    kept = df[~df["trial_key"].duplicated(keep="first") | df["trial_key"].isna()]
    kept.attrs.update(df.attrs)
    return kept
