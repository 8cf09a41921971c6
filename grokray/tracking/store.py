"""The tracking store as plain records: the one reader (and the few writes) the layers above tracking/ use, so
that none of them names MLflow. A run is a RunRecord of strings and numbers; a curve is a list of points. A
tracker backend other than MLflow replaces this module (and client.py beneath it), not its callers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

from mlflow.entities import Metric
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from .client import STREAM_PAGE, find_parent, log_metrics, retry, search_all, search_pages
from .records import Point, RunRecord, read_table, table_rows
from .schema import (
    LAUNCH_TAG,
    RUNS_SUMMARY_ARTIFACT,
    RUNS_SUMMARY_TAG,
    children_filter,
    parents_filter,
)


def record(run) -> RunRecord:
    """An MLflow Run as a RunRecord."""
    info, data = run.info, run.data
    return RunRecord(info.run_id, info.run_name or "", info.experiment_id, info.status, info.start_time,
                     info.end_time, dict(data.params), dict(data.tags), dict(data.metrics))


class Store:
    """One tracking store (a tracking URI): experiments, runs, curves and artifacts as plain records."""

    def __init__(self, uri: str):
        self.uri = uri
        self.client = MlflowClient(uri)
        # A download draws a progress bar on stderr: noise in a one-line error, in a log, in a notebook cell.
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

    # -- reading ------------------------------------------------------------------------------------------------
    def experiment_id(self, name: str) -> str | None:
        exp = self.client.get_experiment_by_name(name)
        return None if exp is None else exp.experiment_id

    def experiments(self) -> dict[str, str]:
        """id -> name of every experiment."""
        return {e.experiment_id: e.name for e in self.client.search_experiments()}

    def runs(self, experiment_ids: str | list[str]) -> list[RunRecord]:
        """Every run of the experiments, page by page."""
        return [record(r) for r in search_all(self.client, experiment_ids)]

    def parents(self, experiment_ids: str | list[str]) -> list[RunRecord]:
        """Every launch's parent run in the experiments."""
        return [record(r) for r in search_all(self.client, experiment_ids, parents_filter())]

    def latest_parent(self, experiment_ids: list[str], tags: dict[str, str] | None = None) -> RunRecord | None:
        """The parent run that started last in the experiments (among those carrying `tags`)."""
        found = retry(self.client.search_runs, experiment_ids, filter_string=parents_filter(tags), max_results=1,
                      order_by=["attributes.start_time DESC"]) if experiment_ids else []
        return record(found[0]) if found else None

    def launch_parent(self, launch_key: str) -> RunRecord | None:
        """The parent run of one launch, by the key it was given before the server answered (names its spool),
        in whichever experiment it is."""
        return self.latest_parent(list(self.experiments()), {LAUNCH_TAG: launch_key})

    def children_of(self, parent_run_id: str, experiment_id: str) -> list[RunRecord]:
        """A launch's child runs as the store holds them now (no runs table: see iter_children)."""
        return [record(r) for r in search_all(self.client, experiment_id, children_filter(parent_run_id))]

    def run(self, run_id: str) -> RunRecord:
        return record(retry(self.client.get_run, run_id))

    def parent_by_id(self, run_id: str) -> RunRecord | None:
        """A launch's parent by its run id, or by the first characters of it that pages print (at least 6, unique
        among the store's launches); None when no run, or more than one launch, matches."""
        try:
            return record(retry(self.client.get_run, run_id))
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST" and "not found" not in str(exc):
                raise
        if len(run_id) < 6:
            return None
        found = [p for p in self.parents(list(self.experiments())) if p.run_id.startswith(run_id)]
        return found[0] if len(found) == 1 else None

    def children(self, parent: RunRecord) -> list[RunRecord]:
        """A launch's child runs (iter_children, as a list)."""
        return list(self.iter_children(parent))

    def iter_children(self, parent: RunRecord) -> Iterator[RunRecord]:
        """A launch's child runs, one at a time: from its runs table when its close wrote one (one download,
        whatever the launch's size), else page by page from the store."""
        rows = parent.tags.get(RUNS_SUMMARY_TAG, "")
        if rows.isdigit():
            import tempfile

            with tempfile.TemporaryDirectory() as d:
                try:
                    path = self.download(parent.run_id, RUNS_SUMMARY_ARTIFACT, d)
                    whole = table_rows(path) == int(rows)
                except Exception:  # noqa: BLE001 - a table that cannot be read: the runs themselves are the truth
                    whole = False
                if whole:
                    yield from read_table(path)
                    return
        for page in search_pages(self.client, parent.experiment_id, children_filter(parent.run_id), size=STREAM_PAGE):
            yield from map(record, page)

    def parent(self, experiment_name: str, spec_hash: str, kind: str | None = None) -> RunRecord | None:
        """The latest parent run of this exact configuration set (of one driver's kind, if given)."""
        found = find_parent(self.client, experiment_name, spec_hash, kind)
        return None if found is None else record(found)

    def curve(self, run_id: str, key: str) -> list[Point]:
        """Every logged point of one metric, by step."""
        history = retry(self.client.get_metric_history, run_id, key)
        return sorted((Point(m.step, m.value, m.timestamp) for m in history), key=lambda p: p.step)

    def artifact_paths(self, run_id: str, path: str | None = None) -> list[str]:
        return [a.path for a in retry(self.client.list_artifacts, run_id, path)]

    def download(self, run_id: str, path: str, dst: str | Path) -> Path:
        """One artifact (a file or a folder) of a run, into dst; raises if the run has none by that path."""
        return Path(self.client.download_artifacts(run_id, path, str(dst)))

    # -- the few writes of the layers above (launches write through tracking/parent.py and pack_runs.py) --------
    def log_metric(self, run_id: str, key: str, value: float, timestamp_ms: int | None = None) -> None:
        retry(self.client.log_metric, run_id, key, value, timestamp=timestamp_ms)

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        retry(self.client.set_tag, run_id, key, value)

    def log_batch(self, run_id: str, metrics: dict[str, float], params: dict | None = None,
                  tags: dict | None = None, step: int = 0) -> None:
        """Metrics (at `step`, now), params and tags in as few calls as MLflow's limits allow."""
        now = int(time.time() * 1000)
        log_metrics(self.client, run_id, [Metric(k, float(v), now, step) for k, v in metrics.items()], tags=tags,
                    params=params)

    def log_artifact(self, run_id: str, local: str | Path, artifact_dir: str) -> None:
        retry(self.client.log_artifact, run_id, str(local), artifact_dir)
