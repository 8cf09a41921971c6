"""Tracked runs -> pandas. The store (grokray.tracking.store, the one module that speaks MLflow) is opened inside
the functions that read one, so `import analysis` stays light, and the pure `runs_to_frame` works on RunRecords
from any source.

Layout read (grokray/tracking): one experiment per spec name; a parent run per `grokray run`; one child run
(MLflow's nesting tag) per configuration with params = flattened dotted keys of the trial config (strings),
tags grokray.phase / model / task / trial_key / pack_id / swept / log_axes, step series train/acc, val/acc,
train/loss, val/loss, weight_norm, and summary metrics step_train_acc_<thr>, step_val_acc_<thr>, grokking_gap,
final/..., steps_run.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from array import array
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from grokray.contracts import CURVE_METRICS
from grokray.phases import summary_metric
from grokray.tracking.records import RunRecord
from grokray.tracking.schema import (
    CODE_VERSION_TAG,
    LOG_AXES_TAG,
    MODEL_TAG,
    PACK_ID_TAG,
    PARENT,
    PHASE_COUNT_TAG,
    PHASE_TAG,
    ROLE_TAG,
    RUNS_SUMMARY_TAG,
    SPEC_HASH_TAG,
    SWEPT_TAG,
    TASK_TAG,
    TRIAL_KEY_TAG,
)
from grokray.tracking.uri import DEFAULT_TRACKING_URI, resolve_tracking_uri

from .errors import SOURCE, AnalysisError

__all__ = ["DEFAULT_TRACKING_URI", "SERIES", "load_curves", "load_runs", "parent_runs", "runs_to_frame"]

SERIES = CURVE_METRICS  # step series: not summary columns
_TAG_COLUMNS = {
    PHASE_TAG: "phase",
    MODEL_TAG: "model",
    TASK_TAG: "task",
    TRIAL_KEY_TAG: "trial_key",
    PACK_ID_TAG: "pack_id",
}
_CROSSING = re.compile(r"^step_(train|val)_acc_(.+)$")
_NONE = {"None", "null", ""}
# What a phase diagram reads besides the swept axes (narrow=True): the seed, the budget and threshold its subtitle
# and undecodable cells need, and the summaries of the crossings.
DIAGRAM_PARAMS = frozenset({"seed", "phases.threshold", "phases.budget", "train.steps"})
DIAGRAM_METRICS = frozenset({"grokking_gap", "ideal_val_acc", "steps_run"})


def _diagram_param(key: str, swept: list[str]) -> bool:
    """Is this param one a phase diagram reads? A swept optim.default.<field> is logged per group."""
    if key in DIAGRAM_PARAMS or key in swept:
        return True
    return key.startswith("optim.") and key.count(".") == 2 and f"optim.default.{key.rsplit('.', 1)[1]}" in swept


def _uri(tracking_uri: str | None) -> str:
    return resolve_tracking_uri(tracking_uri)  # the launch's own rule: a relative SQLite path is the cwd's


def open_store(tracking_uri: str | None):
    """The tracking store at tracking_uri (default: the launch's): MLflow is imported here, when one is read."""
    from grokray.tracking.store import Store

    return Store(_uri(tracking_uri))


def _json_list(text: str | None) -> list[str]:
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def _numeric(col: pd.Series) -> pd.Series:
    """Numbers where every present value is one ('1e-3', '45'); 'None' counts as missing; else the strings.
    Decided and parsed once per distinct value (a swept param has a few across 10^5 runs): a pass per run made
    temporaries of every row, 50 MB at a 10^5-run close."""
    codes, uniques = pd.factorize(col, use_na_sentinel=True)
    values = [None if isinstance(v, str) and v in _NONE else v for v in uniques]
    present = [v for v in values if v is not None]
    if present and not any(isinstance(v, str) and v in ("True", "False") for v in present):
        num = pd.to_numeric(pd.Series(present, dtype=object), errors="coerce")
        if not num.isna().any():
            parsed = iter(num.astype(float).tolist())
            lookup = np.array([np.nan if v is None else next(parsed) for v in values] + [np.nan])
            out = pd.Series(lookup[codes], index=col.index, name=col.name)  # code -1 (missing): the last, NaN
            integers = all(isinstance(v, int | np.integer) or re.fullmatch(r"-?\d+", str(v)) for v in present)
            return out.astype("int64") if integers and not out.isna().any() else out
    # not all numbers (or none present): the strings, 'None' as missing
    return col.map(lambda v: None if v is None or (isinstance(v, str) and v in _NONE) else v)


def _default_group_axes(df: pd.DataFrame, swept) -> list[str]:
    """A swept `optim.default.<field>` is logged as each group's own param (`optim.hidden.<field>`, ...): give it
    its column back, from the first group that has one, so diagrams can use the axis the spec swept."""
    added = []
    for key in swept:
        if key in df or not key.startswith("optim.default."):
            continue
        field = key[len("optim.default."):]
        groups = [c for c in df.columns if c.startswith("optim.") and c.count(".") == 2 and c.endswith("." + field)]
        if groups:
            df[key] = df[groups[0]]
            added.append(key)
    return added


def runs_to_frame(runs: Iterable[RunRecord], narrow: bool = False, keep: Iterable[str] = ()) -> pd.DataFrame:
    """One row per run (grokray.tracking.records.RunRecord).

    narrow: only what a phase diagram reads (the swept axes, DIAGRAM_PARAMS, the phase and crossings, the model;
    no run_id, name, status or start time), with repeated strings shared, so that a launch's close holds about
    0.2 KB per run, not every param and metric. keep: params a narrow frame keeps too (the diagram's axes a user named).

    Columns: run_id, parent_run_id, run_name, the params by dotted key (swept axes first; numeric where possible),
    phase, step_train, step_val (crossing steps at the threshold; 0.9 when several), gap, steps_run, final/...,
    other summary metrics (e.g. step_val_acc_0.9 under its own name), model, task, trial_key, pack_id, status,
    start_time. df.attrs: swept, log_axes (unions of the tags), params (param columns).
    """
    frame = FrameBuilder(narrow, keep)
    for r in runs:
        frame.add(r)
    return frame.frame()


def _own_threshold(value) -> str | None:
    """The threshold part of the run's crossing names (phases.summary_metric's rule), from its logged param."""
    try:
        return summary_metric("", float(value))[1:]
    except (TypeError, ValueError):
        return None


class FrameBuilder:
    """runs_to_frame a run at a time: a launch's close hands it each record of the one pass in which it ends and
    counts the children, so its diagram reads no run a second time (`add` per run, then `frame()` once)."""

    def __init__(self, narrow: bool = False, keep: Iterable[str] = ()):
        self.narrow = narrow
        self.keep = frozenset(keep)
        self.columns: dict[str, list] = {}  # built a column at a time: a row's dict lives only while its run is read
        self.params_seen: dict[str, None] = {}
        self.swept: dict[str, None] = {}
        self.log: dict[str, None] = {}
        self.n = 0

    def add(self, r: RunRecord) -> None:
        narrow, columns, n = self.narrow, self.columns, self.n
        shared = sys.intern if narrow else str
        tags, metrics = r.tags, r.metrics
        row = {} if narrow else {"run_id": r.run_id, "status": r.status, "start_time": r.start_ms,
                                 "run_name": r.name}
        row["parent_run_id"] = None if r.parent_id is None else shared(r.parent_id)
        for tag, col in _TAG_COLUMNS.items():
            if not narrow or col in ("phase", "model", "task", "trial_key"):  # key: a pool dedupes
                row[col] = None if tags.get(tag) is None else shared(tags[tag])
        run_swept = _json_list(tags.get(SWEPT_TAG))
        for k, v in r.params.items():
            if not narrow or k in self.keep or _diagram_param(k, run_swept):
                self.params_seen.setdefault(k, None)
                row[k] = shared(v) if isinstance(v, str) else v
        self.swept.update(dict.fromkeys(run_swept))
        self.log.update(dict.fromkeys(_json_list(tags.get(LOG_AXES_TAG))))
        crossings: dict[str, dict[str, float]] = {"train": {}, "val": {}}
        for k, v in metrics.items():
            if k in SERIES or (narrow and k not in DIAGRAM_METRICS and not _CROSSING.match(k)):
                continue
            row[k] = v
            m = _CROSSING.match(k)
            if m:
                crossings[m.group(1)][m.group(2)] = v
        own = _own_threshold(r.params.get("phases.threshold"))  # the run's own, else 0.9, else the lowest logged
        for side, by_thr in crossings.items():
            thr = own if own in by_thr else "0.9" if "0.9" in by_thr else (sorted(by_thr)[0] if by_thr else None)
            row[f"step_{side}"] = by_thr[thr] if thr else np.nan
        row["gap"] = metrics.get("grokking_gap", np.nan)
        for k, v in row.items():
            col = columns.get(k)
            if col is None:  # a key this run is the first to have; numbers 8 bytes each, not a float object
                col = columns[k] = array("d", [np.nan]) * n if type(v) is float else [np.nan] * n
            elif type(v) is not float and type(col) is array:
                col = columns[k] = list(col)
            col.append(v)
        self.n = n = n + 1
        for col in columns.values():
            if len(col) < n:  # a key this run lacks
                col.append(np.nan)

    def frame(self) -> pd.DataFrame:
        """The runs added so far, as runs_to_frame builds them; the builder lets go of its columns (once, at a
        launch's close, the frame is what the figure reads: both at once are twice the memory)."""
        columns, self.columns, self.n = self.columns, {}, 0
        df = pd.DataFrame(columns)
        del columns
        swept = self.swept
        params = list(self.params_seen)
        if df.empty:
            df = pd.DataFrame(columns=["run_id", "parent_run_id", "run_name", "phase", "step_train", "step_val",
                                       "gap"])
        for k in params:
            df[k] = _numeric(df[k])
        params += _default_group_axes(df, swept)
        for k in ("step_train", "step_val", "gap"):
            df[k] = pd.to_numeric(df[k], errors="coerce")
        metric_cols = [c for c in df.columns if c not in params and c not in _TAG_COLUMNS.values() and c not in
                       {"run_id", "parent_run_id", "run_name", "status", "start_time", "step_train", "step_val", "gap"}]
        finals = sorted(c for c in metric_cols if c.startswith("final/"))
        others = sorted(c for c in metric_cols if not c.startswith("final/") and c != "steps_run")
        ordered_params = [k for k in swept if k in params] + [k for k in params if k not in swept]
        order = ["run_id", "parent_run_id", "run_name", *ordered_params, "phase", "step_train", "step_val", "gap",
                 *(["steps_run"] if "steps_run" in df else []), *finals, *others, "model", "task", "trial_key",
                 "pack_id", "status", "start_time"]
        df = df.reindex(columns=[c for c in order if c in df.columns])
        df.attrs.update(swept=list(swept), log_axes=list(self.log), params=ordered_params)
        return df


def _experiment_id(store, experiment: str) -> str:
    exp_id = store.experiment_id(experiment)
    if exp_id is not None:
        return exp_id
    known = store.experiments()
    if experiment in known:  # an experiment id
        return experiment
    raise ValueError(f"no MLflow experiment {experiment!r}; known: {sorted(known.values())}")


def load_runs(experiment: str | None = None, parent_run_id: str | None = None, tracking_uri: str | None = None, *,
              latest_parent: bool = False, narrow: bool = False, keep: Iterable[str] = ()) -> pd.DataFrame:
    """Child runs (one per configuration) of an experiment or of one parent run, as a DataFrame (see runs_to_frame):
    a row a configuration, with its swept params, phase and crossing steps, as `grokray analyze` reads them.

    Args:
        experiment: the spec's name (or the experiment's id). Every child run of all its parent runs is returned,
            with a parent_run_id column.
        parent_run_id: one `grokray run` instead (give exactly one of experiment and parent_run_id).
        tracking_uri: the store; default MLFLOW_TRACKING_URI, else sqlite:///mlflow.db.
        latest_parent: keep only the children of the most recently started parent.
        narrow: only the columns a phase diagram reads, and the params in `keep`; one launch's runs are then
            streamed, never all held at once.
        keep: params kept by a narrow frame.

    Example: `grokray.load_runs("quickstart").groupby("phase").size()`
    """
    if (experiment is None) == (parent_run_id is None):
        raise ValueError("give exactly one of experiment= or parent_run_id=")
    store = open_store(tracking_uri)
    if parent_run_id is not None:
        parent = store.parent_by_id(parent_run_id)
        if parent is None:
            raise AnalysisError(SOURCE, f"no launch's parent run {parent_run_id!r} in {_uri(tracking_uri)}: give its "
                                "run id, or the first 8 characters of it that a page prints")
        exp_id, runs = parent.experiment_id, store.iter_children(parent)
        parent_run_id = parent.run_id
    else:
        exp_id = _experiment_id(store, experiment)
        runs = _children_of_launches(store, exp_id, latest_parent)
    df = runs_to_frame(runs, narrow=narrow, keep=keep)
    df.attrs.update(experiment_id=exp_id, tracking_uri=_uri(tracking_uri), parent_run_id=parent_run_id)
    return df


def _children_of_launches(store, exp_id: str, latest_parent: bool) -> Iterable[RunRecord]:
    """Every child run of the experiment (of its latest parent only, with latest_parent). Where grokray's launches
    closed with a runs table, those are read instead of paging through every run; runs of parents without one
    (a launch still running, killed, or made before the tables) are read from the store."""
    parents = store.parents([exp_id])
    if not any(RUNS_SUMMARY_TAG in p.tags for p in parents):
        everything = store.runs([exp_id])
        runs = [r for r in everything if r.parent_id]
        if latest_parent and runs:
            ids = {r.parent_id for r in runs}
            start = {r.run_id: r.start_ms or 0 for r in everything if r.run_id in ids}
            latest = max(ids, key=lambda p: start.get(p, 0))
            runs = [r for r in runs if r.parent_id == latest]
        return runs
    parents.sort(key=lambda p: p.start_ms or 0, reverse=True)
    if latest_parent:  # the latest launch that made runs, streamed: 10^5 records are ~1 GB held at once
        for parent in parents:
            runs = store.iter_children(parent)
            first = next(runs, None)
            if first is not None:
                return itertools.chain([first], runs)
        return []
    runs = [r for p in parents for r in store.children(p)]
    return sorted(runs, key=lambda r: (-(r.start_ms or 0), r.run_id))  # the store's own order: newest first


def parent_runs(experiment: str, tracking_uri: str | None = None) -> pd.DataFrame:
    """The `grokray run`s of an experiment: run_id, run_name, start_time, status, spec_hash, code_version and a
    phase_count.<phase> column per phase (from the parent's tags), newest first."""
    store = open_store(tracking_uri)
    everything = store.runs([_experiment_id(store, experiment)])
    parents = {r.parent_id for r in everything if r.parent_id}
    rows = []
    for r in everything:
        if r.run_id not in parents and r.tags.get(ROLE_TAG) != PARENT:
            continue
        tags = r.tags
        row = {"run_id": r.run_id, "run_name": r.name, "start_time": r.start_ms,
               "status": r.status, "spec_hash": tags.get(SPEC_HASH_TAG),
               "code_version": tags.get(CODE_VERSION_TAG)}
        row.update({k.removeprefix("grokray."): int(v) for k, v in tags.items()
                    if k.startswith(PHASE_COUNT_TAG) and v.isdigit()})
        rows.append(row)
    df = pd.DataFrame(rows, columns=None if rows else ["run_id", "run_name", "start_time", "status", "spec_hash",
                                                       "code_version"])
    return df.sort_values("start_time", ascending=False, kind="stable").reset_index(drop=True)


def load_curves(run_ids: Sequence[str], tracking_uri: str | None = None, *,
                keys: Sequence[str] = ("train/acc", "val/acc"), max_workers: int = 8) -> pd.DataFrame:
    """Step series of selected runs as a long frame (run_id, key, step, value), sorted by run, key, step.

    One get_metric_history request per (run, key) returns the whole series (MLflow pages it internally); never
    a request per step. Against a server the requests run in a thread pool; a SQLite store is read serially.

    Args:
        run_ids: the child runs (load_runs' run_id column).
        tracking_uri: the store; default MLFLOW_TRACKING_URI, else sqlite:///mlflow.db.
        keys: the metrics read.
        max_workers: concurrent requests against a server.

    Example: `grokray.load_curves(runs.run_id[:4]).pivot_table("value", ["run_id", "step"], "key")`
    """
    store = open_store(tracking_uri)
    jobs = [(r, k) for r in dict.fromkeys(run_ids) for k in keys]

    def fetch(job):
        run_id, key = job
        return [(run_id, key, m.step, m.value) for m in store.curve(run_id, key)]

    if _uri(tracking_uri).startswith(("http://", "https://")) and len(jobs) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max_workers) as pool:
            parts = list(pool.map(fetch, jobs))
    else:
        parts = [fetch(j) for j in jobs]
    df = pd.DataFrame([row for part in parts for row in part], columns=["run_id", "key", "step", "value"])
    df = df.astype({"step": "int64", "value": "float64"})
    # a retried write can store a step twice; keep the last value
    df = df.drop_duplicates(["run_id", "key", "step"], keep="last")
    return df.sort_values(["run_id", "key", "step"], kind="stable").reset_index(drop=True)
