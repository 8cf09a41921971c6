"""A tracked run as plain data, what tracking/store.py hands the layers above it (and analysis builds its tables
from): no MLflow here, so importing these costs nothing and any source of runs can fill them."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from .schema import ENDED_TAG, PARENT_ID_TAG, PHASE_TAG


class RunStatus(StrEnum):
    """A run's state in the store's words (MLflow's, the one backend): compared through these members, never spelled
    outside tracking/ (a StrEnum: equal to the store's own strings)."""

    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    KILLED = "KILLED"
    FAILED = "FAILED"


@dataclass(frozen=True)
class RunRecord:
    """One run: its identity, status, times (ms since the epoch) and its params, tags and last metric values."""

    run_id: str
    name: str
    experiment_id: str
    status: str
    start_ms: int | None
    end_ms: int | None
    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, float]

    @property
    def parent_id(self) -> str | None:
        """The launch (parent run) this run is a configuration of; None for a parent or a run of another tool."""
        return self.tags.get(PARENT_ID_TAG)


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
    present (any value), and, if given, the status. A tracker turns it into its own query (MLflow: a filter
    string, tracking/mlflow_tracker.py); `matches` is the rule itself, for a tracker that filters in memory."""

    tags: dict[str, str] = field(default_factory=dict)
    with_tags: tuple[str, ...] = ()
    status: RunStatus | None = None

    def matches(self, r: RunRecord) -> bool:
        return (all(r.tags.get(k) == v for k, v in self.tags.items())
                and all(k in r.tags for k in self.with_tags)
                and (self.status is None or r.status == self.status))

    def where(self, tags: dict[str, str]) -> RunQuery:
        """This query, narrowed to runs that also carry each of `tags` with its value."""
        return replace(self, tags={**self.tags, **tags})


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
