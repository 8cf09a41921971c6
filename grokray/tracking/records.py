"""A tracked run as plain data, what tracking/store.py hands the layers above it (and analysis builds its tables
from), and the Tracker contract every store implements in these terms: no MLflow here, so importing these costs
nothing and any source of runs can fill them."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from .schema import ENDED_TAG, PHASE_TAG


class RunStatus(StrEnum):
    """A run's state in the store's words (MLflow's, the one backend): compared through these members, never spelled
    outside tracking/ (a StrEnum: equal to the store's own strings)."""

    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    KILLED = "KILLED"
    FAILED = "FAILED"


@dataclass(frozen=True)
class RunRecord:
    """One run: its identity, status, times (ms since the epoch), its params, tags and last metric values, and the
    launch (parent run) it is a configuration of (None for a parent or a run of another tool). How a store links a
    run to its parent is the tracker's own (MLflow: its nesting tag, tracking/mlflow_tracker.py)."""

    run_id: str
    name: str
    experiment_id: str
    status: str
    start_ms: int | None
    end_ms: int | None
    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, float]
    parent_id: str | None = None


@dataclass(frozen=True)
class Point:
    """One logged value of a metric's curve."""

    step: int
    value: float
    timestamp_ms: int


class RunNotFound(LookupError):
    """No run by that id in the store (or it was deleted)."""


@dataclass(frozen=True)
class RunQuery:
    """Which runs a search returns, in grokray's words: each of `tags` equal to its value, each of `with_tags`
    present (any value), and, if given, the status and the parent run. A tracker turns it into its own query
    (MLflow: a filter string, tracking/mlflow_tracker.py); `matches` is the rule itself, for a tracker that filters
    in memory."""

    tags: dict[str, str] = field(default_factory=dict)
    with_tags: tuple[str, ...] = ()
    status: RunStatus | None = None
    parent_id: str | None = None

    def matches(self, r: RunRecord) -> bool:
        return (all(r.tags.get(k) == v for k, v in self.tags.items())
                and all(k in r.tags for k in self.with_tags)
                and (self.status is None or r.status == self.status)
                and (self.parent_id is None or r.parent_id == self.parent_id))

    def where(self, tags: dict[str, str]) -> RunQuery:
        """This query, narrowed to runs that also carry each of `tags` with its value."""
        return replace(self, tags={**self.tags, **tags})


@runtime_checkable
class Tracker(Protocol):
    """One tracking store, in grokray's words: experiments by name, runs as RunRecords (their status a RunStatus),
    curves as Points, artifacts as files. `tracking.open_tracker(uri)` returns one: MLflow's is the real one
    (tracking/mlflow_tracker.py), tracking/memory.py the one tests use. Everything that writes or reads runs (a
    launch's parent, a pack's runs, delivery and replay, the readers' Store) is written against this list, so a new
    backend is one class in tracking/ that passes tests/test_tracker_contract.py. Failures a caller may retry later
    (the store is away) are those tracking.client.is_transient accepts; a missing run raises RunNotFound."""

    uri: str

    def experiment_id(self, name: str) -> str | None:
        """The id of the experiment `name`, or None."""

    def ensure_experiment(self, name: str) -> str:
        """The id of the experiment `name`, made (or restored, if deleted) when it is not there."""

    def experiments(self) -> dict[str, str]:
        """id -> name of every experiment."""

    def create_run(self, experiment_id: str, name: str, tags: dict[str, str], start_ms: int | None,
                   parent_id: str | None = None) -> str:
        """A new RUNNING run (a configuration of the launch `parent_id`, if given: the tracker keeps the link its own
        way, and RunRecord.parent_id and RunQuery.parent_id read it); its id."""

    def get_run(self, run_id: str) -> RunRecord:
        """The run as a RunRecord (its metrics: each key's latest value); RunNotFound if absent or deleted."""

    def search(self, experiment_ids: list[str], query: RunQuery, page_size: int = 1000,
               page_token: str | None = None) -> tuple[list[RunRecord], str | None]:
        """One page of the runs that match a RunQuery, newest start first, and the token of the next (None: last)."""

    def log(self, run_id: str, points: list[tuple[str, float, int, int]] | None = None,
            params: dict[str, str] | None = None, tags: dict[str, str] | None = None) -> int:
        """Curve points ((key, value, timestamp_ms, step) each), params and tags, however many: the tracker splits
        them within its own limits. Returns the requests it took."""

    def delete_tag(self, run_id: str, key: str) -> None: ...

    def rename_run(self, run_id: str, name: str) -> None:
        """The run's name (RunRecord.name) becomes `name`: a reopened run takes the name of the trial that finishes
        it. How the store keeps a name is the tracker's own (MLflow's is a tag of its own)."""

    def set_status(self, run_id: str, status: RunStatus, end_ms: int | None = None) -> None:
        """RunStatus.RUNNING reopens a run; any other ends it at `end_ms` (default: now)."""

    def delete_run(self, run_id: str) -> None: ...

    def curve(self, run_id: str, key: str) -> list[Point]:
        """Every logged Point of one metric, by step."""

    def latest_steps(self, run_id: str) -> dict[str, int]:
        """Metric key -> the step of its latest logged point."""

    def artifact_paths(self, run_id: str, folder: str | None = None) -> list[str]:
        """The artifact paths directly under `folder` (the run's root if None)."""

    def log_artifact(self, run_id: str, local: str | Path, folder: str | None = None) -> None:
        """A local file, stored as `folder/<its name>`."""

    def log_text(self, run_id: str, text: str, path: str) -> None: ...

    def download(self, run_id: str, path: str, dst: str | Path) -> Path:
        """One artifact (a file, or a folder with what is under it) into the folder dst under its own name (a/b.png:
        dst/b.png); the local Path."""



def ended_by_close(r: RunRecord, now_ms: int) -> RunRecord:
    """A child a stop left RUNNING, as the launch's close ends it: FINISHED at its own stop time if its phase
    came (a kill between its tags and its end; the phase travels with ENDED_TAG), else KILLED now."""
    if PHASE_TAG not in r.tags:
        return replace(r, status=RunStatus.KILLED.value, end_ms=now_ms)
    ended = r.tags.get(ENDED_TAG, "")
    return replace(r, status=RunStatus.FINISHED.value, end_ms=int(ended) if ended.isdigit() else now_ms)


def record_line(r: RunRecord) -> str:
    """One record as one JSON line of the launch's runs table (tracking.schema.RUNS_SUMMARY_ARTIFACT)."""
    return json.dumps(asdict(r), separators=(",", ":")) + "\n"


def read_table(path: str | Path) -> Iterator[RunRecord]:
    """A runs table's records, one at a time: a reader of a 10^5-run launch never holds the whole table."""
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.strip():
                yield RunRecord(**json.loads(line))


def table_rows(path: str | Path) -> int:
    """How many records a runs table holds; raises if any line is not one (a cut or corrupted upload)."""
    return sum(1 for _ in read_table(path))
