"""Tracking throughput through `mlflow server`: SQLite against PostgreSQL, 1 / 8 / 32 writer processes, side by side.

Each writer is what a Tune trial runs: grokray's own PackTracker for one synthetic pack of K members (the
quickstart's configuration, ~50 params each), opening its runs, sending `reports` rounds of curve points (5
series, `points` steps each per round), then the summaries, the phase tag and the end of every run. Writers start
together; runs/s and points/s are over the wall time from their start to the last writer's end. A delivery is one
batch (one member's points of one report) on the wire, timed in the courier's own thread; p50/p99 over all.

`--concurrency 1` is grokray before the bulk change (one request at a time per worker); the default runs both
it and the current setting (SERVER_CONCURRENCY requests in flight per worker), so the gain is measured in the
same run, against the same servers.

    .venv/bin/python benchmarks/bench_tracking.py [--writers 1,8,32] [--members 32] [--server-workers 4]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import tempfile
import time

from grokray.tracking.local_servers import GUNICORN_OPTS, LocalPostgres, MlflowServer
from grokray.tracking.pack_runs import SERVER_CONCURRENCY
from grokray.tracking.records import RunStatus
from grokray.tracking.schema import CONFIGURATION, ROLE_TAG

SERIES = ("train/loss", "train/acc", "val/loss", "val/acc", "weight_norm")


class SyntheticResult:
    """What PackTracker reads from an engine MemberResult: the curve so far, and at the end the summary."""

    def __init__(self, steps):
        self.curve = {"step": steps, **{k: [0.5 + 1e-4 * s for s in steps] for k in SERIES}}
        self.phase, self.steps_run = "grokking", steps[-1] if steps else 0
        self.ideal_val_acc = None  # no decodability measured (a real result of a model without it)

    def summary(self, threshold):
        return {"step_train_acc_0.9": 10.0, "step_val_acc_0.9": 900.0, "grokking_gap": 890.0,
                "steps_run": float(self.steps_run)}


def writer(args) -> dict:
    """One pack's tracking, as a Tune trial does it; returns its timings."""
    url, exp_id, parent, w, members, reports, points, concurrency, start_at = args
    from grokray.spec.build import load_spec
    from grokray.tracking import delivery
    from grokray.tracking.pack_runs import PackTracker, RunTarget

    latencies = []
    real = delivery.deliver

    def timed(tracker, batch, dedup, **kw):
        t0 = time.perf_counter()
        try:
            return real(tracker, batch, dedup, **kw)
        finally:
            latencies.append(time.perf_counter() - t0)

    delivery.deliver = timed
    spec = load_spec(os.path.join(os.path.dirname(__file__), "..", "sweeps", "quickstart.yaml"))
    config = spec.first_trial().to_dict()
    pack = {"pack_id": f"pack-{w:04d}", "members": [
        {"config": config, "key": f"w{w}-m{i}", "name": f"w{w} m{i}", "point": {}} for i in range(members)]}
    ctx = RunTarget(url, exp_id, parent, "bench", "bench", spool_dir=tempfile.mkdtemp(prefix="bench-spool-"),
                    concurrency=concurrency)
    while time.time() < start_at:
        time.sleep(0.005)
    t0 = time.perf_counter()
    tracker = PackTracker(ctx, pack)
    tracker.open()
    t_open = time.perf_counter() - t0
    for r in range(1, reports + 1):
        steps = list(range(r * points))
        results = [SyntheticResult(steps) for _ in range(members)]
        if r < reports:
            tracker.log_curves(results)
    tracker.finish(results, [0.9] * members, [time.time()] * members)  # every member stopped now
    left = tracker.close()
    return {"wall": time.perf_counter() - t0, "open": t_open, "latencies": latencies, "left": left,
            "calls": tracker.calls}


def measure(url: str, writers: int, members: int, reports: int, points: int, concurrency: int) -> dict:
    from grokray.tracking.client import search_all
    from grokray.tracking.records import RunQuery
    from grokray.tracking.trackers import open_tracker

    tracker = open_tracker(url)
    exp_id = tracker.ensure_experiment(f"bench-{writers}-{concurrency}-{time.time_ns()}")
    parent = tracker.create_run(exp_id, "bench", {}, None)
    start_at = time.time() + 2.0  # every writer imported and waiting: they start together
    jobs = [(url, exp_id, parent, w, members, reports, points, concurrency, start_at) for w in range(writers)]
    with mp.get_context("spawn").Pool(writers) as pool:
        outs = pool.map(writer, jobs)
    wall = max(o["wall"] for o in outs)
    runs = writers * members
    per_run = reports * points * len(SERIES) + 4  # curve points + the summaries
    lat = sorted(x for o in outs for x in o["latencies"])
    stored = search_all(tracker, exp_id, RunQuery({ROLE_TAG: CONFIGURATION}))
    finished = sum(r.status == RunStatus.FINISHED for r in stored)
    return {"runs_per_s": runs / wall, "points_per_s": runs * per_run / wall, "wall_s": wall, "runs": runs,
            "finished": finished, "undelivered": sum(o["left"] for o in outs),
            "p50_ms": 1e3 * statistics.median(lat), "p99_ms": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
            "open_s": max(o["open"] for o in outs)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", default="1,8,32")
    parser.add_argument("--members", type=int, default=32, help="K: runs per writer (one pack)")
    parser.add_argument("--reports", type=int, default=4)
    parser.add_argument("--points", type=int, default=10, help="steps per series per report")
    parser.add_argument("--server-workers", type=int, default=4)
    parser.add_argument("--concurrency", default=f"1,{SERVER_CONCURRENCY}",
                        help="requests in flight per writer; 1 is the serial client of before")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--uvicorn", action="store_true", help="MLflow's default uvicorn server, not gunicorn")
    args = parser.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {platform.machine()}, {os.cpu_count()} cores; mlflow server "
          f"--workers {args.server_workers} ({'uvicorn' if args.uvicorn else 'gunicorn ' + GUNICORN_OPTS}) on "
          f"127.0.0.1; K={args.members} members per writer, "
          f"{args.reports * args.points * len(SERIES) + 4} points per run")
    print("| backend | writers | requests in flight per writer | runs (FINISHED) | runs/s | points/s | "
          "delivery p50 ms | "
          "p99 ms | wall s | points left in spools |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    servers = {}
    pg = None
    try:
        with tempfile.TemporaryDirectory() as root:
            for backend in args.backends.split(","):
                store = None
                if backend == "postgres":
                    pg = LocalPostgres().start()
                    store = pg.uri
                os.makedirs(f"{root}/{backend}", exist_ok=True)
                servers[backend] = MlflowServer(f"{root}/{backend}", store, workers=args.server_workers,
                                                gunicorn=not args.uvicorn).start()
            for srv in servers.values():  # first requests: connection pools, SQLAlchemy's first queries
                measure(srv.url, 2, 4, 1, args.points, SERVER_CONCURRENCY)
            for writers in (int(w) for w in args.writers.split(",")):
                for concurrency in (int(c) for c in args.concurrency.split(",")):
                    for backend, srv in servers.items():  # side by side at each point: drift hits both
                        m = measure(srv.url, writers, args.members, args.reports, args.points, concurrency)
                        print(f"| {backend} | {writers} | {concurrency} | {m['runs']} ({m['finished']}) | "
                              f"{m['runs_per_s']:.1f} | {m['points_per_s']:,.0f} | {m['p50_ms']:.0f} | "
                              f"{m['p99_ms']:.0f} | {m['wall_s']:.1f} | {m['undelivered']} |", flush=True)
    finally:
        for srv in servers.values():
            srv.stop()
        if pg is not None:
            pg.stop()


if __name__ == "__main__":
    main()
