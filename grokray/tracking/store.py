"""The tracking store as the layers above tracking/ read it: a launch's parent and children, a run by (a prefix of)
its id, curves and artifacts, as RunRecords and Points, over any Tracker (open_tracker), so none of them names
MLflow. A new tracker backend changes nothing here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from .client import STREAM_PAGE, clean, find_parent, retry, search_all, search_pages
from .queries import children_query, parents_query
from .records import Point, RunNotFound, RunRecord, read_table, table_rows
from .schema import LAUNCH_TAG, RUNS_SUMMARY_ARTIFACT, RUNS_SUMMARY_TAG
from .trackers import open_tracker


class Store:
    """One tracking store (a tracking URI): experiments, runs, curves and artifacts as plain records."""

    def __init__(self, uri: str):
        self.uri = uri
        self.tracker = open_tracker(uri)

    # -- reading ------------------------------------------------------------------------------------------------
    def experiment_id(self, name: str) -> str | None:
        return self.tracker.experiment_id(name)

    def experiments(self) -> dict[str, str]:
        """id -> name of every experiment."""
        return self.tracker.experiments()

    def runs(self, experiment_ids: str | list[str]) -> list[RunRecord]:
        """Every run of the experiments, page by page."""
        return search_all(self.tracker, experiment_ids)

    def parents(self, experiment_ids: str | list[str]) -> list[RunRecord]:
        """Every launch's parent run in the experiments."""
        return search_all(self.tracker, experiment_ids, parents_query())

    def latest_parent(self, experiment_ids: list[str], tags: dict[str, str] | None = None) -> RunRecord | None:
        """The parent run that started last in the experiments (among those carrying `tags`)."""
        found = retry(self.tracker.search, experiment_ids, parents_query(tags), 1)[0] if experiment_ids else []
        return found[0] if found else None

    def launch_parent(self, launch_key: str) -> RunRecord | None:
        """The parent run of one launch, by the key it was given before the server answered (names its spool),
        in whichever experiment it is."""
        return self.latest_parent(list(self.experiments()), {LAUNCH_TAG: launch_key})

    def children_of(self, parent_run_id: str, experiment_id: str) -> list[RunRecord]:
        """A launch's child runs as the store holds them now (no runs table: see iter_children)."""
        return search_all(self.tracker, experiment_id, children_query(parent_run_id))

    def run(self, run_id: str) -> RunRecord:
        return retry(self.tracker.get_run, run_id)

    def parent_by_id(self, run_id: str) -> RunRecord | None:
        """A launch's parent by its run id, or by the first characters of it that pages print (at least 6, unique
        among the store's launches); None when no run, or more than one launch, matches."""
        try:
            return retry(self.tracker.get_run, run_id)
        except RunNotFound:
            pass
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
                if whole:  # a table written before records carried their parent: the table's parent is theirs
                    yield from (r if r.parent_id else replace(r, parent_id=parent.run_id) for r in read_table(path))
                    return
        for page in search_pages(self.tracker, parent.experiment_id, children_query(parent.run_id), size=STREAM_PAGE):
            yield from page

    def parent(self, experiment_name: str, spec_hash: str, kind: str | None = None) -> RunRecord | None:
        """The latest parent run of this exact configuration set (of one driver's kind, if given)."""
        return find_parent(self.tracker, experiment_name, spec_hash, kind)

    def curve(self, run_id: str, key: str) -> list[Point]:
        """Every logged point of one metric, by step."""
        return retry(self.tracker.curve, run_id, key)

    def artifact_paths(self, run_id: str, path: str | None = None) -> list[str]:
        return retry(self.tracker.artifact_paths, run_id, path)

    def download(self, run_id: str, path: str, dst: str | Path) -> Path:
        """One artifact (a file or a folder) of a run, into dst; raises if the run has none by that path."""
        return self.tracker.download(run_id, path, dst)

    # -- the few writes of the layers above (launches write through tracking/parent.py and pack_runs.py) --------
    def log_metric(self, run_id: str, key: str, value: float, timestamp_ms: int | None = None) -> None:
        now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        retry(self.tracker.log, run_id, [(key, float(value), now, 0)])

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        retry(self.tracker.log, run_id, tags={key: value})

    def log_batch(self, run_id: str, metrics: dict[str, float], params: dict | None = None,
                  tags: dict | None = None, step: int = 0) -> None:
        """Metrics (at `step`, now), params and tags in as few calls as the tracker's limits allow."""
        now = int(time.time() * 1000)
        retry(self.tracker.log, run_id, [(k, float(v), now, step) for k, v in metrics.items()], clean(params or {}),
              clean(tags or {}))

    def log_artifact(self, run_id: str, local: str | Path, artifact_dir: str) -> None:
        retry(self.tracker.log_artifact, run_id, local, artifact_dir)
