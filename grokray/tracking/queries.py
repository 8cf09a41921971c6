"""The searches grokray makes, as RunQuery values built from schema's names: which runs are a launch's parent,
its children, one launch. Every tracker answers the same queries (tracking/mlflow_tracker.py turns them into
MLflow's filter strings)."""

from __future__ import annotations

from .records import RunQuery, RunStatus
from .schema import KIND_TAG, LAUNCH_TAG, PACK_ID_TAG, PARENT, PHASE_TAG, ROLE_TAG, SPEC_HASH_TAG


def parents_query(tags: dict[str, str] | None = None, status: RunStatus | None = None) -> RunQuery:
    """Launches' parent runs (that carry each of `tags`, and have `status`, if given)."""
    return RunQuery({ROLE_TAG: PARENT, **(tags or {})}, status=status)


def parent_query(spec_hash: str, kind: str | None = None) -> RunQuery:
    """The parent runs of one configuration set (of one driver's kind, if given)."""
    return parents_query({SPEC_HASH_TAG: spec_hash, **({KIND_TAG: kind} if kind else {})})


def launch_query(launch_key: str) -> RunQuery:
    """The parent of one launch, found by the key it was given before the server answered."""
    return parents_query({LAUNCH_TAG: launch_key})


def children_query(parent_run_id: str, pack_id: str | None = None) -> RunQuery:
    """A launch's child runs (of one pack, if given)."""
    return RunQuery({PACK_ID_TAG: pack_id} if pack_id else {}, parent_id=parent_run_id)


def classified_query() -> RunQuery:
    """Runs that carry their phase: configurations that finished."""
    return RunQuery(with_tags=(PHASE_TAG,))
