"""MLflow layout: one experiment per spec, one parent run per `grokray run`, one child run per configuration.

Everything goes through `MlflowClient` (no global active run, so workers of many packs never share state).
Metrics are sent with `log_batch` in chunks of at most 1000; a retried or resumed pack finds each member's
child run by its trial key and logs only curve points beyond the last step already stored.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import time
from functools import partial
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from .delivery import (
    SPOOL_DIRNAME,
    Batch,
    Courier,
    is_transient,
    quick_failing_http,
    replay_dir,
    server_answers,
    spool_files,
)

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
OPEN_ATTEMPTS = 12  # opening a pack's runs waits out a tracking server restart of about a minute
# Requests a worker keeps in flight to a tracking server (run creation, a report's batches): the server spends
# most of a request waiting on its database, so a pack of many members is bound by round trips, not by CPU.
# A SQLite file takes one writer at a time: 1.
SERVER_CONCURRENCY = 8
MAX_METRICS = 1000  # mlflow.utils.validation.MAX_METRICS_PER_BATCH
MAX_PARAMS_TAGS = 100  # mlflow.utils.validation.MAX_PARAMS_TAGS_PER_BATCH
MAX_VALUE_LEN = 6000
SECRET = re.compile(r"token|password|passwd|secret|credential|key", re.IGNORECASE)
OURS = frozenset({"grokray.trial_key"})
PHASE_TAG = "grokray.phase"
ROLE_TAG = "grokray.role"
STARTS_TAG = "grokray.starts"  # how many times a worker opened this configuration's run (1 unless retried/resumed)


def resolve_tracking_uri(uri: str | None = None, cwd: str | Path | None = None) -> str:
    """--tracking-uri, else MLFLOW_TRACKING_URI, else sqlite:///mlflow.db; relative file paths made absolute
    (Ray Tune runs each trial in its own directory, so a relative path would scatter databases)."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
    base = Path(cwd or os.getcwd())
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        rel = uri[len("sqlite:///"):]
        if rel and rel != ":memory:":
            return "sqlite:///" + str((base / rel).resolve())
    if "://" not in uri:
        return str((base / uri).resolve())
    return uri


def ui_hint(uri: str) -> str:
    if uri.startswith("sqlite:"):
        return f"mlflow ui --backend-store-uri {uri}   (serves http://127.0.0.1:5000)"
    if uri.startswith("http"):
        return f"open {uri}"
    return f"mlflow ui --backend-store-uri {uri}"


def is_secret(name: str) -> bool:
    return name not in OURS and bool(SECRET.search(name))


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
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=root, capture_output=True, text=True, timeout=5, check=True,
        )
        if out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        from importlib.metadata import version

        return version("grokray")
    except Exception:  # noqa: BLE001 - any metadata problem means "unknown"
        return "unknown"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _retry(fn, *args, attempts: int = 6, **kwargs):
    """SQLite allows one writer at a time; packs logging at once may see 'database is locked' briefly, and a
    tracking server may be restarting. Transient failures are retried with backoff (0.2 s doubling, at most
    15 s a wait); anything else is raised at once."""
    for i in range(attempts):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            if i == attempts - 1 or not is_transient(exc):
                raise
            time.sleep(min(15.0, 0.2 * 2**i))
    return None


def log_metrics(client: MlflowClient, run_id: str, metrics: list[Metric], tags: dict | None = None,
                params: dict | None = None, attempts: int = 6) -> int:
    """Send metrics, params and tags in as few `log_batch` calls as MLflow's limits allow (1000 metrics,
    100 params + tags, 1000 entities per call). Params go first, tags ride in the last call. Returns calls made."""
    param_list = [Param(k, v) for k, v in clean(params or {}).items()]
    tag_list = [RunTag(k, v) for k, v in clean(tags or {}).items()]
    calls, mi = 0, 0
    while True:
        batch_params, param_list = param_list[:MAX_PARAMS_TAGS], param_list[MAX_PARAMS_TAGS:]
        room_tags = MAX_PARAMS_TAGS - len(batch_params)
        n_metrics = min(MAX_METRICS - len(batch_params), len(metrics) - mi)
        batch_metrics = metrics[mi : mi + n_metrics]
        mi += n_metrics
        last = not param_list and mi >= len(metrics)
        batch_tags = []
        if last:
            batch_tags, tag_list = tag_list[:room_tags], tag_list[room_tags:]
            last = not tag_list
        if batch_params or batch_metrics or batch_tags:
            _retry(client.log_batch, run_id, metrics=batch_metrics, params=batch_params, tags=batch_tags,
                   attempts=attempts)
            calls += 1
        if last:
            return calls


def get_or_create_experiment(client: MlflowClient, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            client.restore_experiment(exp.experiment_id)
        return exp.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # noqa: BLE001 - created concurrently by another driver
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def search_all(client: MlflowClient, experiment_id: str, filter_string: str) -> list:
    runs, token = [], None
    while True:
        page = _retry(client.search_runs, [experiment_id], filter_string=filter_string, max_results=1000,
                      page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def child_runs(client: MlflowClient, experiment_id: str, parent_run_id: str) -> list:
    return search_all(client, experiment_id, f"tags.mlflow.parentRunId = '{parent_run_id}'")


def phase_counts(runs) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in runs:
        phase = r.data.tags.get(PHASE_TAG)
        if phase:
            counts[phase] = counts.get(phase, 0) + 1
    return dict(sorted(counts.items()))


def use_wal(uri: str) -> None:
    """Put a local SQLite store in write-ahead-log mode (a property of the file, so every worker gets it):
    packs then commit their log_batch calls without taking the whole database's lock, and each commit costs
    less (measured: the workers' MLflow time fell by 17% on the bench_sweep grid)."""
    if not uri.startswith("sqlite:///") or uri.endswith(":memory:"):
        return
    import sqlite3

    con = sqlite3.connect(uri[len("sqlite:///"):], timeout=30)
    try:
        con.execute("PRAGMA journal_mode=WAL")
    finally:
        con.close()


# -- driver side ---------------------------------------------------------------------------------------------
class SweepTracker:
    """The parent run of one `grokray run` (reused by --resume)."""

    def __init__(self, uri: str, experiment_name: str):
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        self.experiment_id = get_or_create_experiment(self.client, experiment_name)
        self.parent_run_id: str | None = None
        use_wal(uri)

    def start_parent(self, spec, plan, experiment_path: str, spec_text: str, extra_tags: dict | None = None) -> str:
        tags = {
            **(extra_tags or {}),
            ROLE_TAG: "parent",
            "grokray.spec_hash": spec.hash(),
            "grokray.code_version": code_version(),
            "grokray.configurations": plan.n_configs,
            "grokray.packs": len(plan.packs),
            "grokray.experiment_path": experiment_path,
            "grokray.swept": plan.swept,
            "grokray.log_axes": sorted(spec.log_axes),
        }
        run = self.client.create_run(self.experiment_id, run_name=f"{spec.name} sweep", tags=clean(tags))
        self.parent_run_id = run.info.run_id
        self.client.log_text(self.parent_run_id, spec_text, "spec.resolved.yaml")
        return self.parent_run_id

    def find_parent(self, spec_hash: str):
        """Latest parent run of this spec (for --resume)."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{ROLE_TAG}` = 'parent' and tags.`grokray.spec_hash` = '{spec_hash}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        return runs[0] if runs else None

    def reopen(self, run_id: str):
        self.parent_run_id = run_id
        self.client.update_run(run_id, status="RUNNING")

    def children(self) -> list:
        return child_runs(self.client, self.experiment_id, self.parent_run_id)

    def finish(self, status: str = "FINISHED") -> dict[str, int]:
        """Phase counts from the children's tags -> parent tags and metrics; end the parent run."""
        counts = phase_counts(self.children())
        metrics = [Metric(f"phase_count/{p}", float(n), _now_ms(), 0) for p, n in counts.items()]
        tags = {f"grokray.phase_count.{p}": n for p, n in counts.items()}
        log_metrics(self.client, self.parent_run_id, metrics, tags)
        self.client.set_terminated(self.parent_run_id, status)
        return counts


# -- worker side ---------------------------------------------------------------------------------------------
class MemberRun:
    """One configuration's child run: created once, found again by trial key, curve logged incrementally."""

    def __init__(self, run_id: str, last_step: dict[str, int], params: dict | None = None):
        self.run_id = run_id
        self.last_step = last_step  # metric key -> last step stored
        self.pending_params = params or {}  # sent with the first batch of metrics


class PackTracker:
    """Child runs of the members of one pack, opened by the worker that trains it."""

    def __init__(self, ctx: dict, pack: dict):
        self.ctx = ctx
        self.pack = pack
        server = ctx["tracking_uri"].startswith("http")
        if server:
            quick_failing_http()  # the courier spools instead of letting MLflow's client retry for minutes
            os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # a line per ended run
        self.workers = int(ctx.get("tracking_concurrency", SERVER_CONCURRENCY)) if server else 1
        self.client = MlflowClient(tracking_uri=ctx["tracking_uri"])
        self.runs: list[MemberRun] = []
        self._calls = 0
        self.seconds = 0.0  # time spent in MLflow from this worker
        self.spool_dir = Path(ctx.get("spool_dir") or Path.home() / ".grokray" / SPOOL_DIRNAME / ctx["parent_run_id"])
        self.courier = Courier(self.client, self.spool_dir / f"{pack['pack_id']}-{os.getpid()}-{_now_ms()}.jsonl",
                               max_points=int(ctx.get("buffer_points", 200_000)),
                               block_s=float(ctx.get("buffer_block_s", 0.0)), workers=self.workers,
                               probe=partial(server_answers, ctx["tracking_uri"]) if server else None,
                               attempts=1 if server else 3)

    @property
    def calls(self) -> int:
        """MLflow requests made (the benchmark reports them)."""
        return self._calls + self.courier.calls

    def _timed(self, fn, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0

    def open(self, node_id: str = "") -> None:
        self._timed(self._open, node_id)

    def _open(self, node_id: str) -> None:
        ctx, parent = self.ctx, self.ctx["parent_run_id"]
        earlier = [p for p in spool_files(self.spool_dir) if p.name.startswith(f"{self.pack['pack_id']}-")]
        for path in earlier:  # an earlier attempt of this pack spooled batches: deliver them before reading steps
            replay_dir(path.parent, self.client, deadline_s=float(ctx.get("delivery_wait_s", 60.0)), only=[path])
        existing = search_all(
            self.client, ctx["experiment_id"],
            f"tags.mlflow.parentRunId = '{parent}' and tags.`grokray.pack_id` = '{self.pack['pack_id']}'",
        )
        self._calls += 1
        by_key = {r.data.tags.get("grokray.trial_key"): r for r in existing}
        new = [m for m in self.pack["members"] if m["key"] not in by_key]
        if self.workers > 1 and len(new) > 1:  # a fresh pack of many members: its runs created concurrently
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(self.workers, thread_name_prefix="grokray-open") as pool:
                created = dict(zip((m["key"] for m in new), pool.map(lambda m: self._create(m, node_id), new),
                                   strict=True))
        else:
            created = {m["key"]: self._create(m, node_id) for m in new}
        self._calls += len(new)
        for member in self.pack["members"]:
            found = by_key.get(member["key"])
            if found is None:
                self.runs.append(created[member["key"]])
                continue
            last = {}
            for key in found.data.metrics:  # only at a retry or resume
                history = _retry(self.client.get_metric_history, found.info.run_id, key, attempts=OPEN_ATTEMPTS)
                self._calls += 1
                last[key] = max((m.step for m in history), default=-1)
            if found.info.status != "RUNNING" and PHASE_TAG not in found.data.tags:
                _retry(self.client.update_run, found.info.run_id, status="RUNNING")
                self._calls += 1
            starts = int(found.data.tags.get(STARTS_TAG, "1")) + 1  # a retry or resume: counted, so tests
            tags = [RunTag(STARTS_TAG, str(starts))] + ([RunTag("grokray.node", node_id)] if node_id else [])
            _retry(self.client.log_batch, found.info.run_id, tags=tags, attempts=OPEN_ATTEMPTS)  # can see re-runs
            self._calls += 1
            from ..sweep.expand import flatten

            pending = {} if found.data.params else flatten(member["config"])  # died before its first batch
            self.runs.append(MemberRun(found.info.run_id, last, pending))

    def _create(self, member: dict, node_id: str) -> MemberRun:
        from ..sweep.expand import flatten

        cfg = member["config"]
        ctx = self.ctx
        tags = {
            "mlflow.parentRunId": ctx["parent_run_id"],
            ROLE_TAG: "configuration",
            "grokray.model": cfg["model"]["name"],
            "grokray.task": cfg["task"]["name"],
            "grokray.trial_key": member["key"],
            "grokray.pack_id": self.pack["pack_id"],
            "grokray.spec_hash": ctx["spec_hash"],
            "grokray.code_version": ctx["code_version"],
            "grokray.swept": ctx["swept"],
            "grokray.log_axes": ctx["log_axes"],
            "grokray.node": node_id,
            STARTS_TAG: 1,
        }
        run = _retry(self.client.create_run, ctx["experiment_id"], run_name=member["name"], tags=clean(tags),
                     attempts=OPEN_ATTEMPTS)
        return MemberRun(run.info.run_id, {}, flatten(cfg))

    def log_curves(self, results) -> None:
        """Curve points past the last stored step of each series, one log_batch per <= 1000 points."""
        self._timed(self._log, results, None)

    def finish(self, results, thresholds: list[float]) -> None:
        """Remaining curve points, summary metrics and the phase tag in one batch; then end each run."""
        self._timed(self._log, results, thresholds)

    def log_states(self, states: list, name: str = "final_state.pt") -> None:
        """Each member's final state (a dict of tensors, or None) as the artifact `name` of its child run."""
        self._timed(self._log_states, states, name)

    def _log_states(self, states: list, name: str) -> None:
        import tempfile

        import torch

        for run, state in zip(self.runs, states, strict=True):
            if state is None:
                continue
            with tempfile.TemporaryDirectory() as d:
                path = Path(d) / name
                torch.save(state, path)
                _retry(self.client.log_artifact, run.run_id, str(path))
            self._calls += 1

    def _log(self, results, thresholds) -> None:
        now = _now_ms()
        batches = []
        for i, (run, result) in enumerate(zip(self.runs, results, strict=True)):
            metrics = []
            steps = result.curve.get("step", [])
            for key, values in result.curve.items():
                if key == "step":
                    continue
                last = run.last_step.get(key, -1)
                for step, value in zip(steps, values, strict=True):
                    if step > last and value is not None and math.isfinite(value):
                        metrics.append([key, float(value), now, int(step)])
                        run.last_step[key] = step
            tags, terminate = {}, None
            if thresholds is not None:
                summary = result.summary(thresholds[i])
                metrics += [[k, float(v), now, int(result.steps_run)] for k, v in summary.items()
                            if v is not None and math.isfinite(float(v))]
                tags, terminate = {PHASE_TAG: result.phase}, "FINISHED"
            if metrics or tags or run.pending_params or terminate:
                batches.append(Batch(run.run_id, metrics, clean(run.pending_params), clean(tags), terminate))
                run.pending_params = {}
        self.courier.send_many(batches)

    def close(self, wait_s: float | None = None) -> int:
        """Deliver what an outage held back, waiting up to `wait_s` (ctx delivery_wait_s, default 60 s).
        Returns the metric points left in the spool file `self.courier.spool.path` (0: everything delivered)."""
        wait = float(self.ctx.get("delivery_wait_s", 60.0)) if wait_s is None else wait_s
        return self._timed(self.courier.close, wait)
