"""The parent run of one launch (a grid, an adaptive sweep, a search): opened, found again, resumed and closed here
for every driver, so each carries the same tags and each ends the same way.

Closing delivers what the packs left in the spool (a tracking outage), then writes the phase counts and the
status. If the server is still away, the parent's closing batch joins the spool too, and `close` says what is
left undelivered and where, so no caller can forget to report it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlflow.tracking import MlflowClient

from .client import (
    clean,
    code_version,
    find_parent,
    get_or_create_experiment,
    is_transient,
    now_ms,
    phase_counts,
    quick_failing_http,
    retry,
    search_all,
    use_wal,
)
from .delivery import SPOOL_DIRNAME, Batch, Spool, deliver, pending_points, replay_dir
from .schema import (
    CODE_VERSION_TAG,
    CONFIGURATIONS_TAG,
    KIND_TAG,
    KINDS,
    LOG_AXES_TAG,
    PARENT,
    PHASE_COUNT_METRIC,
    PHASE_TAG,
    REQUIRED_PARENT_TAGS,
    ROLE_TAG,
    SPEC_ARTIFACT,
    SPEC_HASH_TAG,
    SWEPT_TAG,
    TRIAL_KEY_TAG,
    children_filter,
    phase_count_tags,
)


@dataclass(frozen=True)
class Closed:
    """How a parent run ended: its phase counts and what the tracking server did not take."""

    status: str
    phase_counts: dict[str, int]
    undelivered_batches: int
    undelivered_points: int
    spool_dir: str

    @property
    def undelivered(self) -> bool:
        return bool(self.undelivered_batches or self.undelivered_points)


def spool_dir_for(storage: str, parent_run_id: str) -> str:
    """Undelivered metrics of one parent live beside the Tune results (shared storage on a cluster), else in
    ~/.grokray when the results go to a cloud URI."""
    if "://" in storage:
        return str(Path.home() / ".grokray" / SPOOL_DIRNAME / parent_run_id)
    return str(Path(storage) / SPOOL_DIRNAME / parent_run_id)


class ParentRun:
    """One launch's parent run in one experiment of one tracking store."""

    def __init__(self, uri: str, experiment_name: str):
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        self.experiment_name = experiment_name
        self.experiment_id = get_or_create_experiment(self.client, experiment_name)
        self.run_id: str | None = None
        use_wal(uri)

    def open(self, kind: str, spec_hash: str, run_name: str, swept: list[str], log_axes: list[str], spec_text: str,
             tags: dict | None = None) -> str:
        """Create the parent with the tags every parent carries (schema.REQUIRED_PARENT_TAGS) and the resolved spec."""
        if kind not in KINDS:
            raise ValueError(f"unknown launch kind {kind!r}; allowed: {', '.join(KINDS)}")
        required = {ROLE_TAG: PARENT, KIND_TAG: kind, SPEC_HASH_TAG: spec_hash, CODE_VERSION_TAG: code_version(),
                    SWEPT_TAG: list(swept), LOG_AXES_TAG: sorted(log_axes)}
        run = retry(self.client.create_run, self.experiment_id, run_name=run_name,
                    tags=clean({**(tags or {}), **required}))
        self.run_id = run.info.run_id
        retry(self.client.log_text, self.run_id, spec_text, SPEC_ARTIFACT)
        return self.run_id

    def find(self, spec_hash: str, kind: str | None = None):
        """The latest parent of this spec hash (and kind) in this experiment, or None."""
        return find_parent(self.client, self.experiment_name, spec_hash, kind)

    def resume(self, run_id: str) -> None:
        self.run_id = run_id
        retry(self.client.update_run, run_id, status="RUNNING")

    @property
    def tags(self) -> dict[str, str]:
        return retry(self.client.get_run, self.run_id).data.tags

    def children(self) -> list:
        return search_all(self.client, self.experiment_id, children_filter(self.run_id))

    def delete_unfinished(self, keys: set[str]) -> int:
        """Delete the children of these trial keys that never got a phase (a round that is started again would
        otherwise leave them beside the runs it makes). Returns how many."""
        stale = [r.info.run_id for r in self.children()
                 if PHASE_TAG not in r.data.tags and r.data.tags.get(TRIAL_KEY_TAG) in keys]
        for run_id in stale:
            retry(self.client.delete_run, run_id)
        return len(stale)

    def set_tag(self, key: str, value) -> None:
        retry(self.client.set_tag, self.run_id, key, clean({key: value})[key])

    def close(self, status: str, spool_dir: str, wait_s: float, fallback_counts: dict[str, int] | None = None,
              configurations: int | None = None, metrics: dict[str, float] | None = None) -> Closed:
        """Deliver the spool, then phase counts (from the children's tags), `configurations`, `metrics` and the
        status. With the server still away, the counts come from `fallback_counts` (what Tune reported) and the
        closing batch is spooled beside the packs' for `grokray replay`."""
        if self.uri.startswith("http"):
            quick_failing_http()  # a server that is still away answers in seconds, not after minutes of retries
        replay_dir(spool_dir, self.client, deadline_s=wait_s)
        counts: dict[str, int] | None = None
        try:
            children = self.children()
            for run in children:  # a kill between a child's phase tag and its end leaves it RUNNING: end it here
                if PHASE_TAG in run.data.tags and run.info.status == "RUNNING":
                    retry(self.client.set_terminated, run.info.run_id, "FINISHED")
            counts = phase_counts(children)
        except Exception as exc:  # noqa: BLE001
            if not is_transient(exc):
                raise
        measured = counts is not None
        counts = dict(sorted((counts if measured else fallback_counts or {}).items()))
        values = {f"{PHASE_COUNT_METRIC}{p}": float(n) for p, n in counts.items()} | (metrics or {})
        tags = phase_count_tags(counts) | ({CONFIGURATIONS_TAG: str(configurations)} if configurations is not None
                                           else {})
        batch = Batch(self.run_id, [[k, v, now_ms(), 0] for k, v in values.items()], {}, tags, status)
        delivered = False
        if measured:  # the server answered a moment ago: send the closing batch as any other
            try:
                deliver(self.client, batch, dedup=False, attempts=6)
                delivered = True
            except Exception as exc:  # noqa: BLE001
                if not is_transient(exc):
                    raise
        if not delivered:
            Spool(Path(spool_dir) / f"parent-{self.run_id}.jsonl").append(batch)
        batches, points = pending_points(spool_dir)
        return Closed(status, counts, batches, points, spool_dir)


def missing_parent_tags(tags: dict[str, str]) -> list[str]:
    """The required tags a parent run lacks (the contract test checks every driver's parent against it)."""
    return [t for t in REQUIRED_PARENT_TAGS if t not in tags]
