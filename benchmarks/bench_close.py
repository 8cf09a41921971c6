"""A launch's close, alone: what the driver's memory does while it pages through N child runs (ending, counting
and writing each to the runs table) and then draws the launch's phase diagram, at N = 10^3 and 10^4.

bench_scale.py measures whole launches, where the close is a few seconds at the end of many minutes; this fills
a SQLite store with N child runs shaped as bench_scale's (the toy's params, tags and summary metrics, lr x weight
decay x 10 seeds) once, then runs the close through an `mlflow server` on it (127.0.0.1), as a cluster's driver
does, in a fresh process per N, and prints its peak RSS above the process's start, and the slope per 1,000 runs;
then `grokray analyze` of that launch (wall and peak RSS), which reads the runs table the close wrote.

    .venv/bin/python benchmarks/bench_close.py [--n 1000,10000] [--copies] [--table 10000,100000] [--work DIR]

The children are tagged by pack (1,000 a pack) and the close reads them pack by pack, as a grid's does.
--copies: fill 1,000 children run by run and copy them in the SQLite file up to N (new run ids, trial keys and
packs; weight decays shifted per copy, so the lattice grows with N as a launch's does): 10^5 in minutes.

--table: `grokray analyze` of launches known only by their runs table (the close's artifact, records shaped as
above), for sizes too large to fill the store with runs one by one.
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
uri, parent_id, packs = sys.argv[1], sys.argv[2], [f"pack-{k:04d}" for k in range(int(sys.argv[4]))]
def rss(): return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
parent = ParentRun(uri, "close", sys.argv[3])
parent.attach(Store(uri).run(parent_id))
gc.collect(); start = rss(); t0 = time.time()
runs = closing_runs()  # as Launch.close: one pass ends, counts and tables each child and hands it to the figure
counts = parent._end_and_count_children(table=True, on_record=runs.add, packs=packs)
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


PHASES = ("comprehension", "grokking", "memorization", "confusion")
PACK = 1000  # children a pack


def bench_spec(n: int):
    from bench_scale import spec_yaml

    from grokray.spec.build import load_spec

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "s.yaml").write_text(spec_yaml(n))
        return load_spec(Path(d) / "s.yaml")


def child(spec, i: int, parent: str) -> tuple[dict, dict, dict]:
    """(tags, params, metrics) of configuration i as a launch of bench_scale's spec logs it. Phases vary by cell
    (a generalizing one has its crossings), so the diagram and its steps heatmap have something to draw."""
    from grokray.phases import crossing_metrics
    from grokray.tracking.client import clean
    from grokray.tracking.schema import (
        CONFIGURATION,
        LOG_AXES_TAG,
        MODEL_TAG,
        PACK_ID_TAG,
        PHASE_TAG,
        ROLE_TAG,
        SWEPT_TAG,
        TASK_TAG,
        TRIAL_KEY_TAG,
        flatten,
    )

    phase = PHASES[(i // 10) % len(PHASES)]
    swept = ["optim.decoder.lr", "optim.decoder.weight_decay", "seed"]
    tags = clean({ROLE_TAG: CONFIGURATION, MODEL_TAG: "toy", TASK_TAG: "addition",
                  TRIAL_KEY_TAG: f"{i:016x}", SWEPT_TAG: swept, PACK_ID_TAG: f"pack-{i // PACK:04d}",
                  LOG_AXES_TAG: ["optim.decoder.lr"], PHASE_TAG: phase})
    metrics = {"train/acc": 0.1, "val/acc": 0.1, "train/loss": 1.0, "val/loss": 1.0, "weight_norm": 4.0,
               "rqi": 0.05, "final/train/acc": 0.1, "final/val/acc": 0.1, "final/train/loss": 1.0,
               "final/val/loss": 1.0, "final/weight_norm": 4.0, "final/rqi": 0.05, "steps_run": 50.0,
               "ideal_val_acc": 0.95 + 0.005 * (i % 10)}
    if phase in ("comprehension", "grokking"):
        train, val = crossing_metrics(0.9)
        metrics |= {train: 10.0 + i % 7, val: 14.0 + i % 7 + (25 if phase == "grokking" else 0)}
    return tags, clean(flatten(spec.trial(spec.point(i)).to_dict())), metrics


def fill(uri: str, n: int) -> str:
    """A parent and n finished children, each as a launch of bench_scale's spec logs it."""
    from grokray.tracking.records import RunStatus
    from grokray.tracking.schema import PARENT, ROLE_TAG
    from grokray.tracking.trackers import open_tracker

    spec = bench_spec(n)
    tracker = open_tracker(uri)
    exp_id = tracker.ensure_experiment("close")
    parent = tracker.create_run(exp_id, "close", {ROLE_TAG: PARENT}, None)
    for i in range(n):
        tags, params, metrics = child(spec, i, parent)
        run = tracker.create_run(exp_id, f"run-{i}", tags, None, parent_id=parent)
        tracker.log(run, [(k, v, 0, 0) for k, v in metrics.items()], params)
        tracker.set_status(run, RunStatus.FINISHED)
    return parent


def fill_by_copies(db: Path, n: int) -> str:
    """A parent of n children: PACK of them run by run (fill), then copied in the SQLite file, copy c as pack c."""
    import sqlite3

    from grokray.tracking.mlflow_tracker import PARENT_TAG  # copies rows of MLflow's own tables

    parent = fill(f"sqlite:///{db}", PACK)
    con = sqlite3.connect(db)
    con.execute("CREATE TEMP TABLE m AS SELECT run_uuid AS old, '' AS new FROM tags WHERE key = ? AND value = ?",
                (PARENT_TAG, parent))
    value = {"tags": "CASE t.key WHEN 'grokray.trial_key' THEN t.value || printf('-%04d', :c) "
                     "WHEN 'grokray.pack_id' THEN printf('pack-%04d', :c) ELSE t.value END",
             "params": "CASE t.key WHEN 'optim.decoder.weight_decay' THEN CAST(CAST(t.value AS REAL) + 100 * :c AS "
                       "TEXT) ELSE t.value END"}
    for c in range(1, n // PACK):
        con.execute("UPDATE m SET new = lower(hex(randomblob(16)))")
        for table in ("runs", "tags", "params", "latest_metrics", "metrics"):
            cols = [row[1] for row in con.execute(f"PRAGMA table_info({table})")]
            picks = ["m.new" if col == "run_uuid" else value.get(table, "t.value") if col == "value" else f"t.{col}"
                     for col in cols]
            con.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(picks)} FROM {table} t "
                        "JOIN m ON t.run_uuid = m.old", {"c": c})
    con.commit()
    con.close()
    return parent


def table_only(uri: str, n: int, work: Path) -> str:
    """A closed launch of n children known by its runs table alone: the artifact a close writes (one record per
    child, as above) on a parent tagged with its rows, which is all `grokray analyze` of a closed launch reads.
    For N too large to fill the store run by run (10^5 at 20 ms a run is 35 minutes)."""
    import gzip

    from grokray.tracking.records import RunRecord, RunStatus, record_line
    from grokray.tracking.schema import PARENT, ROLE_TAG, RUNS_SUMMARY_ARTIFACT, RUNS_SUMMARY_TAG
    from grokray.tracking.trackers import open_tracker

    spec = bench_spec(n)
    tracker = open_tracker(uri)
    exp_id = tracker.ensure_experiment("close")
    parent = tracker.create_run(exp_id, "close", {ROLE_TAG: PARENT}, None)
    path = work / f"table-{n}" / Path(RUNS_SUMMARY_ARTIFACT).name
    path.parent.mkdir(parents=True)
    with gzip.open(path, "wt", compresslevel=6) as out:
        for i in range(n):
            tags, params, metrics = child(spec, i, parent)
            out.write(record_line(RunRecord(f"{i:032x}", f"run-{i}", exp_id, RunStatus.FINISHED, 0, 1,
                                            params, tags, metrics, parent)))
    tracker.log_artifact(parent, path, str(Path(RUNS_SUMMARY_ARTIFACT).parent))
    tracker.log(parent, tags={RUNS_SUMMARY_TAG: str(n)})
    tracker.set_status(parent, RunStatus.FINISHED)
    return parent


def run_json(script: str, *args) -> dict:
    out = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="1000,10000")
    ap.add_argument("--table", default="", help="also `grokray analyze` of launches of these sizes known by their "
                                                  "runs table alone, e.g. 10000,100000")
    ap.add_argument("--work", default=None)
    ap.add_argument("--copies", action="store_true", help="fill each N by copies of 1,000 children (see above)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.n.split(",") if x]
    tables = [int(x) for x in args.table.split(",") if x]
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-close-"))
    from grokray.tracking.local_servers import MlflowServer

    store = f"sqlite:///{work}/mlflow.db"
    parents = {}
    for n in sizes:  # straight into the SQLite file: 20 ms a run, against 0.3 s through the server
        t0 = time.time()
        parents[n] = (fill_by_copies(work / "mlflow.db", n) if args.copies else fill(store, n), time.time() - t0)
    for n in tables:
        t0 = time.time()
        parents[("table", n)] = (table_only(store, n, work), time.time() - t0)
    server = MlflowServer(work / "server", store, workers=1).start()
    try:
        rows = []
        for n in sizes:
            parent, filled = parents[n]
            row = {"n": n, "fill_s": round(filled, 1), **run_json(CLOSE, server.url, parent, work / f"spool-{n}",
                                                                   -(-n // PACK))}
            # `grokray analyze` of the closed launch, as a user runs it: it reads the runs table the close wrote
            row.update(run_json(ANALYZE, server.url, parent, work / f"analyze-{n}"))
            rows.append(row)
            print(json.dumps(row), flush=True)
        for n in tables:
            parent, made = parents[("table", n)]
            print(json.dumps({"n": n, "table_only": True, "table_s": round(made, 1),
                              **run_json(ANALYZE, server.url, parent, work / f"analyze-table-{n}")}), flush=True)
    finally:
        server.stop()
    for a, b in zip(rows, rows[1:], strict=False):
        per = 1000 / (b["n"] - a["n"])
        print(f"close from N={a['n']} to N={b['n']}: paging +{(b['paging_mb'] - a['paging_mb']) * per:.2f} MB per "
              f"1,000 runs, the whole close +{(b['close_mb'] - a['close_mb']) * per:.2f}")


if __name__ == "__main__":
    main()
