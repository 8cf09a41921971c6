"""An atlas page's data file, data/<stem>.csv: every run the page was drawn from, one row each (piece, swept
axes, seed, phase, crossing steps, ideal accuracy). It is written beside the page, so a reader can check a cell
without the MLflow store. It is read back as runs, so the page's sections re-render from it alone (rerender.py),
through the same analysis as runs read from MLflow.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.load import load_runs, runs_to_frame

from ..models.diagnostics import RQI_THRESHOLD
from ..phases import crossing_metrics, summary_metric
from ..plan.expand import swept_keys
from ..tracking.client import clean
from ..tracking.records import RunRecord, RunStatus
from ..tracking.schema import LOG_AXES_TAG, MODEL_TAG, PHASE_TAG, SWEPT_TAG, TASK_TAG, flatten
from .plan import Figure
from .runner import PieceRecord


def run_columns(threshold: float) -> tuple[str, ...]:
    """The data file's columns after the axes: the phase, the crossings at the figure's own threshold (a spec at
    0.95 lost them when the names were written out at 0.9), the gap, RQI's step, the ideal and final accuracies."""
    return ("phase", *crossing_metrics(threshold), "grokking_gap", summary_metric("step_rqi", RQI_THRESHOLD),
            "ideal_val_acc", "steps_run", "final/train/acc", "final/val/acc")


def write_run_table(df: pd.DataFrame, path: Path, threshold: float) -> None:
    """One row per configuration: the piece, the swept axes, the seed, then run_columns(threshold)."""
    axes = [a for a in df.attrs.get("swept", []) if a in df and a != "seed"]
    keys = ["piece", *axes, *(["seed"] if "seed" in df else [])]
    path.parent.mkdir(parents=True, exist_ok=True)
    df[[*keys, *(c for c in run_columns(threshold) if c in df)]].sort_values(keys).to_csv(path, index=False)


def merge_pieces(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The runs of every piece as one frame, with a `piece` column and the pieces' swept and log axes merged."""
    swept, logs = [], set()
    for name, df in frames.items():
        df["piece"] = name
        swept += [a for a in df.attrs.get("swept", []) if a not in swept]
        logs |= set(df.attrs.get("log_axes", []))
    if not frames:
        return pd.DataFrame()
    first = next(iter(frames.values()))
    out = pd.concat(list(frames.values()), ignore_index=True)
    out.attrs.update(swept=swept, log_axes=sorted(logs), params=first.attrs.get("params", []))
    return out


def load_figure_runs(records: list[PieceRecord], tracking_uri: str) -> pd.DataFrame:
    """The child runs of every piece, from the tracking store."""
    return merge_pieces({r.name: load_runs(parent_run_id=r.parent_run_id, tracking_uri=tracking_uri)
                         for r in records if r.parent_run_id})


def read_run_table(path: str | Path, figure: Figure) -> pd.DataFrame:
    """The runs of a page's data file, as load_figure_runs gives them from MLflow: each row becomes its piece's
    configuration (the spec's fixed fields, logged as a run logs them, then the row's axes and seed) with the
    row's phase and summaries, and goes through the same analysis.load.runs_to_frame."""
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    columns = list(table.columns)
    axes = columns[1:columns.index("phase")]
    metrics = columns[columns.index("phase") + 1:]
    pieces = {p.name: p.spec for p in figure.pieces}
    frames = {}
    for name, rows in table.groupby("piece", sort=False):
        spec = pieces[name]
        config = spec.trial(spec.point(0)).to_dict()
        fixed = clean(flatten(config))
        tags = clean({SWEPT_TAG: swept_keys(spec), LOG_AXES_TAG: sorted(spec.log_axes),
                      MODEL_TAG: config["model"]["name"], TASK_TAG: config["task"]["name"]})
        runs = [RunRecord(f"{name}-{i}", "", "", RunStatus.FINISHED, None, None,
                          fixed | {a: row[a] for a in axes if row[a] != ""},
                          tags | ({PHASE_TAG: row["phase"]} if row["phase"] else {}),
                          {m: float(row[m]) for m in metrics if row[m] != ""})
                for i, row in enumerate(rows.to_dict("records"))]
        frames[name] = runs_to_frame(runs)
    return merge_pieces(frames)
