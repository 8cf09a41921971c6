"""What every tracker call of grokray's needs, whichever backend answers it: retry of transient failures (and
StoreAway, the rule for going on without the store), paging, the latest parent of a spec, credentials kept out of
params and tags, and the store a reading command may open. No MLflow here (tracking/mlflow_tracker.py is MLflow).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

from ..errors import SpecError
from ..phases import counted_phase
from .queries import parent_query
from .records import RunQuery, RunRecord
from .schema import PHASE_TAG, TRIAL_KEY_TAG
from .uri import database_problem, local_store_path, resolve_tracking_uri, scheme_problem, sqlite_file_problem

MAX_VALUE_LEN = 6000
SECRET = re.compile(r"token|password|passwd|secret|credential|key", re.IGNORECASE)
NOT_SECRET = frozenset({TRIAL_KEY_TAG})
TRANSIENT_MARKERS = ("connection", "max retries", "timed out", "timeout", "temporarily", "locked", "refused",
                     "unavailable", "bad gateway", "reset by peer", "remote end closed")


def existing_store(uri: str | None) -> str:
    """The resolved URI of a store that already exists. Reading commands (analyze, atlas --pages-only, ui) call
    it first: opening a missing SQLite file or directory through MLflow would create an empty store there."""
    resolved = resolve_tracking_uri(uri)
    if problem := scheme_problem(resolved) or database_problem(resolved):
        raise SpecError("--tracking-uri", problem)
    path = local_store_path(resolved)
    if path is not None and not path.exists():
        raise SpecError("--tracking-uri", f"no MLflow store at {path} ({resolved}); run a sweep here first, or "
                        "name the store with --tracking-uri or MLFLOW_TRACKING_URI")
    if path is not None and resolved.startswith("sqlite:") and (problem := sqlite_file_problem(path)):
        raise SpecError("--tracking-uri", problem)
    return resolved


def is_secret(name: str) -> bool:
    return name not in NOT_SECRET and bool(SECRET.search(name))


def clean(items: dict) -> dict[str, str]:
    """String values for params/tags, without anything whose name looks like a credential."""
    out = {}
    for k, v in items.items():
        if is_secret(k):
            continue
        text = v if isinstance(v, str) else json.dumps(v) if isinstance(v, list | dict) else str(v)
        out[k] = text[:MAX_VALUE_LEN]
    return out


def code_version() -> str:
    """`git describe` of the checkout grokray runs from, else the installed package version."""
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=root, capture_output=True,
                             text=True, timeout=5, check=True)
        if out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        from importlib.metadata import version

        return version("grokray")
    except Exception:  # noqa: BLE001 - any metadata problem means "unknown"
        return "unknown"


def now_ms() -> int:
    return int(time.time() * 1000)


# -- transient failures ----------------------------------------------------------------------------------------
def is_transient(exc: BaseException) -> bool:
    """Worth retrying later: the server is unreachable, overloaded or locked. A 4xx answer (a bad request) is not."""
    if isinstance(exc, ConnectionError | TimeoutError | OSError):
        return True
    code = getattr(exc, "get_http_status_code", None)
    status = code() if callable(code) else None
    if status is not None and 400 <= status < 500:
        return False
    text = str(exc).lower()
    return any(m in text for m in TRANSIENT_MARKERS) or (status is not None and status >= 500)


class StoreAway:
    """`with StoreAway() as away:` runs the block; an error that says the tracking store is away (is_transient)
    ends the block and sets `away.happened`, so the caller goes on without the store (spooling, deferring, leaving
    the rest to the close or `grokray replay`); any other error is raised. The one place this rule is written."""

    def __init__(self):
        self.happened = False

    def __enter__(self) -> StoreAway:
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or not isinstance(exc, Exception) or not is_transient(exc):
            return False
        self.happened = True
        return True


def retry(fn, *args, attempts: int = 6, on_retry=None, **kwargs):
    """SQLite allows one writer at a time; packs logging at once may see 'database is locked' briefly, and a
    tracking server may be restarting. Transient failures are retried with backoff (0.2 s doubling, at most
    15 s a wait); anything else is raised at once. `on_retry()`, if given, runs before each try again (a caller
    that asks for less then)."""
    for i in range(attempts):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            if i == attempts - 1 or not is_transient(exc):
                raise
            if on_retry is not None:
                on_retry()
            time.sleep(min(15.0, 0.2 * 2**i))
    return None


def create_run_once(tracker, experiment_id: str, name: str, tags: dict, start_ms: int | None, same: RunQuery,
                    attempts: int = 6, look_first: bool = False) -> str:
    """create_run, retried without making the run twice: a try whose answer was lost (the 10-s read timeout of a
    loaded server, which had made the run) is followed by a search for the run `same` finds (its parent and trial
    key) before the next try; `look_first`: before the first try too (an earlier attempt may have made it). CI's
    PostgreSQL load test once stored 1,004 runs for 1,000 configurations. The run is made under the parent `same`
    names, if it names one."""
    look = [look_first]

    def once() -> str:
        if look[0]:
            found, _ = tracker.search([experiment_id], same, 1)
            if found:
                return found[0].run_id
        look[0] = True
        return tracker.create_run(experiment_id, name, tags, start_ms, parent_id=same.parent_id)

    return retry(once, attempts=attempts)


# -- reading and writing ---------------------------------------------------------------------------------------
STREAM_PAGE = 200  # runs per page where a reader streams: a page of 1,000 runs is ~30 MB in passing, and a
# driver paging through 10^4 of them grew 2 MB per 1,000 runs; pages of 200 held it flat (benchmarks/README.md)


def search_pages(tracker, experiment_id: str | list[str], query: RunQuery | None = None, attempts: int = 6,
                 size: int = 1000):
    """The runs matching the query, one page (up to `size`) at a time: a reader of 10^5 runs holds one page. A page
    that fails transiently is asked again at half the size, and later pages keep the smaller size: a server on a
    busy machine answered 1,000 runs in more than the 10-s request timeout six times in a row (CI, 2026-12-03),
    while a smaller page answers within it."""
    ids = [experiment_id] if isinstance(experiment_id, str) else list(experiment_id)
    query, token = query or RunQuery(), None

    def smaller():
        nonlocal size
        size = max(1, size // 2)

    while True:
        page, token = retry(lambda at: tracker.search(ids, query, size, at), token, attempts=attempts,
                            on_retry=smaller)  # size read at each try: smaller() halves it
        yield page
        if not token:
            return


def search_all(tracker, experiment_id: str | list[str], query: RunQuery | None = None, attempts: int = 6
               ) -> list[RunRecord]:
    """Every run matching the query in one experiment (or a list of them), page by page."""
    return [run for page in search_pages(tracker, experiment_id, query, attempts) for run in page]


def find_parent(tracker, experiment_name: str, spec_hash: str, kind: str | None = None) -> RunRecord | None:
    """The latest parent run of this exact configuration set (of one driver's kind, if given), or None."""
    exp_id = tracker.experiment_id(experiment_name)
    if exp_id is None:
        return None
    found, _ = retry(tracker.search, [exp_id], parent_query(spec_hash, kind), 1)
    return found[0] if found else None


def counted_phase_of(run: RunRecord) -> str:
    """A classified run's phase as counted: an undecodable split apart (grokray.phases.counted_phase); "" if none."""
    phase = run.tags.get(PHASE_TAG, "")
    threshold = float(run.params.get("phases.threshold", 0.9))
    return phase and counted_phase(phase, run.metrics.get("ideal_val_acc"), threshold)


def phase_counts(runs) -> dict[str, int]:
    """Classified runs per phase, as counted (counted_phase_of)."""
    counts: dict[str, int] = {}
    for r in runs:
        phase = counted_phase_of(r)
        if phase:
            counts[phase] = counts.get(phase, 0) + 1
    return dict(sorted(counts.items()))
