"""Representation metrics from the final states a sweep saved (spec `artifacts: {final_state: true}`).

Each child run then has the artifact `final_state.pt`: a dict of CPU tensors (the member's parameters by name,
cropped to its own sizes; for rfm the feature matrix `M`), readable with torch.load(weights_only=True).

`state_metrics` is pure (a state dict of arrays in, numbers out); `load_states` downloads the artifacts;
`representation_metrics` joins both for the runs of a DataFrame from analysis.load_runs. torch and mlflow are
imported only by the functions that need them.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from grokray.engine.states import STATE_ARTIFACT  # the file the engine writes, named once

from .load import open_store
from .representations import agop_circulant_distance, fourier_spectrum, pca, rqi

__all__ = ["EMBEDDINGS", "METRIC_COLUMNS", "STATE_ARTIFACT", "load_states", "representation_metrics",
           "state_metrics"]

EMBEDDINGS = {"toy": "embed", "transformer": "tok"}  # model family -> its symbol-embedding parameter
METRIC_COLUMNS = ("rqi", "pca_entropy", "pca_top_ratio", "fourier_top_frequency", "fourier_top_fraction",
                  "agop_circulant_distance")


def _nan_row() -> dict:
    return dict.fromkeys(METRIC_COLUMNS, math.nan)


def state_metrics(state: dict, model: str | None, task: str | None = None, p: int | None = None,
                  op: str | None = None, delta: float = 0.01) -> dict:
    """Metrics of one final state. NaN where a metric does not apply.

    Embeddings (toy `embed`, transformer `tok`; the first p rows are the residues 0..p-1):
      - rqi: Liu et al.'s representation quality index, for addition (task `addition`, or `modular` with op add,
        then parallelograms mod p);
      - pca_entropy, pca_top_ratio: entropy of the explained-variance ratio, and the first component's share;
      - fourier_top_frequency, fourier_top_fraction: the strongest frequency over Z_p (modular tasks).
    rfm (`M`): agop_circulant_distance, |M - C|/|M| with C the block-wise nearest (reflected) circulant.
    """
    row = _nan_row()
    param = EMBEDDINGS.get(model or "")
    modular = task == "modular" and p is not None
    if param is not None and param in state:
        emb = np.asarray(state[param], dtype=float)
        if p is not None and emb.shape[0] >= p:
            emb = emb[:p]
        if task == "addition" or (modular and op == "add"):
            row["rqi"] = rqi(emb, delta=delta, modulus=p if modular else None)
        result = pca(emb)
        row["pca_entropy"] = result.entropy + 0.0  # no -0.0 for a one-dimensional embedding
        row["pca_top_ratio"] = float(result.explained_variance_ratio[0])  # an embedding has at least one component
        if modular and emb.shape[0] >= p:
            spec = fourier_spectrum(emb, p)
            row["fourier_top_frequency"] = float(spec.top_frequency)
            row["fourier_top_fraction"] = spec.top_fraction
    if "M" in state and p:
        m = np.asarray(state["M"], dtype=float)
        if m.ndim == 2 and m.shape[0] == m.shape[1] and m.shape[0] % p == 0:
            row["agop_circulant_distance"] = agop_circulant_distance(m, p).total
    return row


def load_states(run_ids: Iterable[str], tracking_uri: str | None = None, name: str = STATE_ARTIFACT,
                dst: str | Path | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Download and read the saved final state of each run: {run_id: {param name: array}}. Runs without the
    artifact are left out. dst: where to keep the downloaded files (default: a temporary directory)."""

    store = open_store(tracking_uri)  # its tracker draws no progress bar per download (tracking/mlflow_tracker.py)
    out: dict[str, dict[str, np.ndarray]] = {}
    _download(store, run_ids, name, dst, out)
    return out


def _download(store, run_ids, name, dst, out) -> None:
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(dst) if dst is not None else Path(tmp)
        for run_id in dict.fromkeys(run_ids):
            if name not in store.artifact_paths(run_id):
                continue
            target = root / run_id
            target.mkdir(parents=True, exist_ok=True)
            local = store.download(run_id, name, target)
            state = torch.load(local, map_location="cpu", weights_only=True)
            out[run_id] = {k: v.double().numpy() for k, v in state.items() if isinstance(v, torch.Tensor)}


def _int_or_none(v) -> int | None:
    try:
        return None if v is None or pd.isna(v) else int(v)
    except (TypeError, ValueError):
        return None


def representation_metrics(runs: pd.DataFrame, tracking_uri: str | None = None, delta: float = 0.01,
                           states: dict | None = None) -> pd.DataFrame:
    """One row per run of `runs` (a frame from analysis.load_runs) that has a saved final state: run_id, phase,
    the swept axes, and METRIC_COLUMNS (see state_metrics). Empty (same columns) when no run saved one.
    states: what load_states returned for these runs (downloaded here when not given)."""
    uri = tracking_uri or runs.attrs.get("tracking_uri")
    if states is None:
        states = load_states(runs["run_id"], uri) if len(runs) else {}
    axes = [a for a in runs.attrs.get("swept", []) if a in runs]
    rows = []
    for _, r in runs[runs["run_id"].isin(list(states))].iterrows():
        p = _int_or_none(r.get("task.p"))
        metrics = state_metrics(states[r["run_id"]], r.get("model"), r.get("task"), p, r.get("task.op"), delta)
        rows.append({"run_id": r["run_id"], "phase": r.get("phase"), **{a: r[a] for a in axes}, **metrics})
    return pd.DataFrame(rows, columns=["run_id", "phase", *axes, *METRIC_COLUMNS])
