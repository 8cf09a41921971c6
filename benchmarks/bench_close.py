"""A launch's close, alone: what the driver's memory does while it pages through N child runs (ending, counting
and writing each to the runs table) and then draws the launch's phase diagram, at N = 10^3 and 10^4.

bench_scale.py measures whole launches, where the close is a few seconds at the end of many minutes; this fills
a SQLite store with N child runs shaped as bench_scale's (the toy's params, tags and summary metrics, lr x weight
decay x 10 seeds) once, then runs the close through an `mlflow server` on it (127.0.0.1), as a cluster's driver
does, in a fresh process per N, and prints its peak RSS above the process's start, and the slope per 1,000 runs;
then `grokray analyze` of that launch (wall and peak RSS), which reads the runs table the close wrote.

    .venv/bin/python benchmarks/bench_close.py [--n 1000,10000] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

CLOSE = """
import gc, json, resource, sys, time
from grokray.run.report import closing_runs, draw_diagram
from grokray.tracking.parent import ParentRun
from grokray.tracking.store import Store
import analysis.pipeline, matplotlib.pyplot  # loaded before the baseline: a constant, not what grows
uri, parent_id = sys.argv[1], sys.argv[2]
def rss(): return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
parent = ParentRun(uri, "close", sys.argv[3])
parent.attach(Store(uri).run(parent_id))
gc.collect(); start = rss(); t0 = time.time()
runs = closing_runs()  # as Launch.close: one pass ends, counts and tables each child and hands it to the figure
counts = parent._end_and_count_children(table=True, on_record=runs.add)
paging = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - start; t1 = time.time()
line = draw_diagram(uri, parent_id, runs)
close = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - start
print(json.dumps({"paging_mb": paging, "close_mb": close, "paging_s": round(t1 - t0, 1),
                  "figure_s": round(time.time() - t1, 1), "runs": sum(counts.values()), "figure": line[:14]}))
"""
ANALYZE = """
import json, resource, subprocess, sys, time
t0 = time.time()
subprocess.run([sys.executable, "-m", "grokray", "analyze", "--parent", sys.argv[2], "--tracking-uri", sys.argv[1],
                "--no-log", "-o", sys.argv[3]], check=True, capture_output=True)
print(json.dumps({"analyze_s": round(time.time() - t0, 1),
                  "analyze_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def fill(uri: str, n: int) -> str:
    """A parent and n finished children, each as a launch of bench_scale's spec logs it."""
    from bench_scale import spec_yaml
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    from grokray.spec import load_spec
    from grokray.tracking.client import clean
    from grokray.tracking.schema import flatten

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "s.yaml").write_text(spec_yaml(n))
        spec = load_spec(Path(d) / "s.yaml")
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("close") or client.get_experiment(client.create_experiment("close"))
    parent = client.create_run(exp.experiment_id, tags={"grokray.role": "parent"}).info.run_id
    swept = ["optim.decoder.lr", "optim.decoder.weight_decay", "seed"]
    for i in range(n):
        config = spec.trial(spec.point(i)).to_dict()
        tags = clean({"mlflow.parentRunId": parent, "grokray.role": "configuration", "grokray.model": "toy",
                      "grokray.task": "addition", "grokray.trial_key": f"{i:016x}", "grokray.swept": swept,
                      "grokray.log_axes": ["optim.decoder.lr"], "grokray.phase": "confusion"})
        run = client.create_run(exp.experiment_id, tags=tags).info.run_id
        metrics = {"train/acc": 0.1, "val/acc": 0.1, "train/loss": 1.0, "val/loss": 1.0, "weight_norm": 4.0,
                   "rqi": 0.05, "final/train/acc": 0.1, "final/val/acc": 0.1, "final/train/loss": 1.0,
                   "final/val/loss": 1.0, "final/weight_norm": 4.0, "final/rqi": 0.05, "steps_run": 50.0,
                   "ideal_val_acc": 0.8 + 0.02 * (i % 10)}
        client.log_batch(run, metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
                         params=[Param(k, v) for k, v in clean(flatten(config)).items()])
        client.set_terminated(run, "FINISHED")
    return parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="1000,10000")
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    sizes = [int(x) for x in args.n.split(",")]
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-close-"))
    from grokray.tracking.local_servers import MlflowServer

    store = f"sqlite:///{work}/mlflow.db"
    parents = {}
    for n in sizes:  # straight into the SQLite file: 20 ms a run, against 0.3 s through the server
        t0 = time.time()
        parents[n] = (fill(store, n), time.time() - t0)
    server = MlflowServer(work / "server", store, workers=1).start()
    try:
        rows = []
        for n in sizes:
            parent, filled = parents[n]
            out = subprocess.run([sys.executable, "-c", CLOSE, server.url, parent, str(work / f"spool-{n}")],
                                 capture_output=True, text=True, cwd=ROOT, check=True)
            row = {"n": n, "fill_s": round(filled, 1), **json.loads(out.stdout.strip().splitlines()[-1])}
            # `grokray analyze` of the closed launch, as a user runs it: it reads the runs table the close wrote
            out = subprocess.run([sys.executable, "-c", ANALYZE, server.url, parent, str(work / f"analyze-{n}")],
                                 capture_output=True, text=True, cwd=ROOT, check=True)
            row.update(json.loads(out.stdout.strip().splitlines()[-1]))
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        server.stop()
    for a, b in zip(rows, rows[1:], strict=False):
        per = 1000 / (b["n"] - a["n"])
        print(f"close from N={a['n']} to N={b['n']}: paging +{(b['paging_mb'] - a['paging_mb']) * per:.2f} MB per "
              f"1,000 runs, the whole close +{(b['close_mb'] - a['close_mb']) * per:.2f}")


if __name__ == "__main__":
    main()
