"""A lab-sized sweep: how grokray's costs grow with the number of configurations N (issue 41).

Each N is one `grokray run` of the toy at width 8 and 50 steps (training is not what is measured) through the
cluster's tracking set-up, an `mlflow server` on PostgreSQL (`--store sqlite` for a file store). The launch runs
as its own process, as a user runs it; this script samples it from /proc while it runs. Per N it prints:

- wall time and time per configuration; tracking core-seconds per configuration (the CPU time the `mlflow server`
  and PostgreSQL processes spent during the launch, over N);
- the driver's peak RSS, and its slope per 1,000 configurations (least squares of RSS against configurations
  finished, sampled each second; the first 10 % of the launch, imports and Ray's start, left out);
- Tune's experiment-state size, and the time to serialise it once (json load + dump of the file: what Tune does
  at each save);
- the Ray GCS's peak RSS;
- rows in the store: child runs with a phase, missing and duplicated trial keys;
- `grokray analyze` wall time and peak RSS (it reads the launch's runs table, summary/runs.jsonl.gz);
- `grokray ui`'s runs page: seconds until its table shows a run, in a headless Chromium.

`--search` measures Optuna's side: grokray's sampler (TPE, multivariate, constant liar) asking with 10^3 and 10^4
finished trials in a journal file, and the time to load that study.

    .venv/bin/python benchmarks/bench_scale.py --n 1000,10000 [--store postgres|sqlite] [--search]
    .venv/bin/python benchmarks/bench_scale.py --n 1000 --prefill 80000   # 10^3 against a store of 8·10^4 runs
        [--pg shared_buffers=2GB --pg max_wal_size=8GB]                      # PostgreSQL's settings
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
BIN = Path(sys.executable).parent
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


def spec_yaml(n: int) -> str:
    """The toy at width 8, 50 steps, over lr x weight decay x seeds: n configurations (n a multiple of 10)."""
    seeds = 10
    cells = n // seeds
    lrs = max(1, int(round(cells ** 0.5)))
    while cells % lrs:
        lrs -= 1
    wds = cells // lrs
    return f"""name: scale-{n}
task: {{name: addition, p: 10, train_size: 45}}
model: {{name: toy, embed_dim: 1, hidden: [8, 8], activation: tanh, head: regression}}
optim:
  embedding: {{name: adam, lr: 1.0e-3, weight_decay: 0.0}}
  decoder: {{name: adamw, lr: 1.0e-3, weight_decay: 0.0}}
train: {{steps: 50, batch_size: full}}
phases: {{threshold: 0.9, budget: 50, gap: 10, stop_when_classified: false}}
seeds: {list(range(seeds))}
sweep:
  optim.decoder.lr: {{logspace: [-4, -2, {lrs}]}}
  optim.decoder.weight_decay: {{linspace: [0.0, 10.0, {wds}]}}
resources: {{cpu: 1, gpu: 0, pack_size: auto}}
"""


# -- /proc sampling ---------------------------------------------------------------------------------------------
def rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except OSError:
        return 0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its reaped children."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / TICK
    except OSError:
        return 0.0


def processes(match) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if match(cmd):
                out.append(int(d))
    return out


def tracking_pids(server_pid: int | None) -> list[int]:
    """The mlflow server (gunicorn/uvicorn workers) and PostgreSQL processes."""
    return processes(lambda c: "mlflow" in c and "server" in c or "postgres" in c or "uvicorn" in c
                     or "gunicorn" in c) + ([server_pid] if server_pid else [])


class Sampler(threading.Thread):
    """Each second: the driver's RSS, the GCS's RSS, and configurations finished (from the progress line)."""

    def __init__(self, pid: int, log: Path, n: int):
        super().__init__(daemon=True)
        self.pid, self.log, self.n = pid, log, n
        self.samples: list[tuple[float, int, int]] = []  # (t, driver rss, configurations done)
        self.gcs_peak = 0
        self.stop = False
        self.keep: Path | None = None  # where the samples are written as they come

    def done(self) -> int:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return 0
        import re

        found = re.findall(r"(\d+)/(\d+) configurations", text)
        return int(found[-1][0]) if found else 0

    def driver(self) -> int:
        """The launch's driver: `grokray` supervises a `python -m grokray` child that runs Ray's driver."""
        kids = processes(lambda c: "-m grokray" in c)
        for pid in kids:
            try:
                if int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == self.pid:
                    return pid
            except (OSError, ValueError):
                continue
        return self.pid

    def run(self):
        t0 = time.time()
        driver = self.pid
        while not self.stop:
            if driver == self.pid:
                driver = self.driver()
            self.samples.append((time.time() - t0, rss(driver), self.done()))
            if self.keep is not None and len(self.samples) % 30 == 0:  # a run stopped midway keeps its samples
                self.keep.write_text(json.dumps(self.samples))
            for pid in processes(lambda c: "gcs_server" in c):
                self.gcs_peak = max(self.gcs_peak, rss(pid))
            time.sleep(1.0)


def rss_slope_per_1000(samples, n: int) -> float:
    """MB of driver RSS per 1,000 configurations finished (least squares), past the first 10 % of the launch and
    before its close (which reads the runs back for the phase diagram)."""
    pts = [(d, r) for _, r, d in samples if 0.1 * n <= d < n and r > 0]
    if len(pts) < 3 or len({d for d, _ in pts}) < 2:
        return float("nan")
    mx = sum(d for d, _ in pts) / len(pts)
    my = sum(r for _, r in pts) / len(pts)
    sxx = sum((d - mx) ** 2 for d, _ in pts)
    sxy = sum((d - mx) * (r - my) for d, r in pts)
    return sxy / sxx * 1000 / 2**20


def timed_child(cmd: list[str], env: dict, log: Path) -> tuple[float, int, int]:
    """Run cmd; (wall s, peak RSS bytes of it and its children, exit code)."""
    t0 = time.time()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
    return time.time() - t0, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status)


# -- one N ------------------------------------------------------------------------------------------------------
def measure(n: int, uri: str, work: Path, server_pid: int | None) -> dict:
    spec = work / f"scale-{n}.yaml"
    spec.write_text(spec_yaml(n))
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    log = work / f"run-{n}.log"
    cmd = [str(BIN / "grokray"), "run", str(spec), "--yes", "--storage", str(work / "results"),
           "--progress", "always"]
    track = tracking_pids(server_pid)
    track_cpu0 = sum(cpu_s(p) for p in track)
    t0 = time.time()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    sampler = Sampler(proc.pid, log, n)
    sampler.keep = work / f"samples-{n}.json"
    sampler.start()
    _, status, _ = os.wait4(proc.pid, 0)
    wall = time.time() - t0
    sampler.stop = True
    sampler.join()
    (work / f"samples-{n}.json").write_text(json.dumps(sampler.samples))  # (s, driver RSS bytes, done)
    track_cpu = sum(cpu_s(p) for p in tracking_pids(server_pid)) - track_cpu0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(log.read_text()[-3000:], file=sys.stderr)
        raise SystemExit(f"grokray run exited {code} at N={n}")

    state = sorted((work / "results").glob(f"scale-{n}_*/experiment_state-*.json"))
    state_bytes = state[-1].stat().st_size if state else 0
    save_s, worker_tracker_s, train_s = float("nan"), 0.0, 0.0
    if state:
        t1 = time.perf_counter()
        raw = json.loads(state[-1].read_text())
        json.dumps(raw)
        save_s = time.perf_counter() - t1
        for _, meta in raw["trial_data"]:  # each pack's own account of its time in MLflow and in training
            last = json.loads(meta).get("last_result") or {}
            worker_tracker_s += float(last.get("tracker_s", 0.0))
            train_s += float(last.get("train_s", 0.0))

    sys.path.insert(0, str(ROOT))
    from grokray.tracking.schema import PHASE_TAG, TRIAL_KEY_TAG
    from grokray.tracking.store import Store

    store = Store(uri)
    t1 = time.perf_counter()
    runs = [r for r in store.runs([store.experiment_id(f"scale-{n}")]) if PHASE_TAG in r.tags]
    read_s = time.perf_counter() - t1
    keys = [r.tags.get(TRIAL_KEY_TAG) for r in runs]

    out_dir = work / f"figures-{n}"
    a_wall, a_rss, a_code = timed_child([str(BIN / "grokray"), "analyze", "--experiment", f"scale-{n}",
                                         "-o", str(out_dir)], env, work / f"analyze-{n}.log")
    ui_s = ui_runs_page_s(uri, runs[0].experiment_id, work) if runs else float("nan")
    return {
        "n": n, "wall_s": wall, "per_config_ms": 1e3 * wall / n, "tracking_core_s_per_config": track_cpu / n,
        "worker_tracker_s_per_config": worker_tracker_s / n, "train_s_per_config": train_s / n,
        "driver_peak_mb": max(r for _, r, _ in sampler.samples) / 2**20,
        "driver_peak_before_close_mb": max((r for _, r, d in sampler.samples if d < n), default=0) / 2**20,
        "driver_mb_per_1000": rss_slope_per_1000(sampler.samples, n),
        "state_mb": state_bytes / 2**20, "state_save_s": save_s, "gcs_peak_mb": sampler.gcs_peak / 2**20,
        "rows": len(runs), "missing": n - len(set(keys)), "duplicated": len(keys) - len(set(keys)),
        "read_runs_s": read_s, "analyze_s": a_wall, "analyze_peak_mb": a_rss / 2**20, "analyze_exit": a_code,
        "ui_runs_page_s": ui_s,
    }


# -- a store that already holds many runs -----------------------------------------------------------------------
def prefill(pg, uri: str, runs: int) -> float:
    """`runs` finished runs under one parent in an experiment of their own, written by SQL
    (grokray.tracking.mlflow_fill), each with what a bench launch's child holds (14 tags, 54 params, 20 latest
    metrics, 300 metric points; the 10^5 launch's store held 25.5 M points at 8·10^4 runs): the launches then
    measure what a store of that size costs them, in minutes instead of the hours a 10^5 launch takes. Returns the
    seconds it took."""
    from grokray.tracking.mlflow_fill import fill_finished_runs
    from grokray.tracking.trackers import open_tracker

    t0 = time.time()
    tracker = open_tracker(uri)
    experiment = tracker.ensure_experiment("prefill")
    parent = tracker.create_run(experiment, "prefill", {}, None)
    fill_finished_runs(pg.uri, experiment, parent, runs)
    return time.time() - t0


# -- grokray ui's runs page, in a headless Chromium -------------------------------------------------------------
def ui_runs_page_s(uri: str, experiment_id: str, work: Path, timeout_s: float = 120.0) -> float:
    """Seconds from navigating to the experiment's runs page until its table shows the launch (its parent run,
    `scale-N sweep`, over its children), in a headless Chromium (headless.py): what a researcher waits for."""
    import re
    import signal

    from headless import CHROMIUM, watch

    from grokray.tracking.local_servers import free_port

    if CHROMIUM is None:
        return float("nan")
    expression, profile = "document.body.innerText.includes(' sweep')", work / "chromium"
    if uri.startswith("http"):  # an `mlflow server` serves its own UI
        _, seconds = watch(f"{uri}/#/experiments/{experiment_id}/runs", expression, bool, profile, free_port(),
                           timeout_s)
        return float("inf") if seconds is None else seconds
    ui = subprocess.Popen([str(BIN / "grokray"), "ui", "--tracking-uri", uri, "--port", str(free_port())],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = re.search(r"(http://127\.0\.0\.1:\d+)/", ui.stdout.readline()).group(1)
        _, seconds = watch(f"{url}/#/experiments/{experiment_id}/runs", expression, bool, profile, free_port(),
                           timeout_s)
    finally:
        ui.send_signal(signal.SIGINT)
        ui.wait(timeout=30)
    return float("inf") if seconds is None else seconds


# -- the search's sampler ---------------------------------------------------------------------------------------
def measure_search(counts: list[int], work: Path, asks: int = 20) -> list[dict]:
    """Time per ask of grokray's TPE with `count` finished trials already in a journal, and the study's load."""
    import optuna
    from optuna.distributions import FloatDistribution
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from grokray.search.config import SearchConfig
    from grokray.search.sampler import make_sampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = {"lr": FloatDistribution(1e-4, 1e-2, log=True), "wd": FloatDistribution(0.0, 10.0),
             "init": FloatDistribution(0.1, 2.0)}
    cfg = SearchConfig.__new__(SearchConfig)
    rows = []
    for count in counts:
        path = work / f"study-{count}.journal"
        storage = JournalStorage(JournalFileBackend(str(path)))
        study = optuna.create_study(study_name="s", storage=storage, direction="minimize")
        fill = optuna.samplers.RandomSampler(seed=0)
        t0 = time.perf_counter()
        trials = []
        for i in range(count):
            params = {k: fill.sample_independent(study, None, k, d) for k, d in space.items()}
            trials.append(optuna.trial.create_trial(params=params, distributions=space,
                                                    value=float(100 + (i * 7919) % 1000)))
        study.add_trials(trials)
        fill_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        loaded = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(path))))
        n_loaded = len(loaded.trials)
        load_s = time.perf_counter() - t0
        cfg.seed, cfg.sampler, cfg.n_trials, cfg.max_concurrent = 0, "tpe", count, 2
        cfg.startup = "random"  # the asks timed here come long after any start-up design
        loaded.sampler = make_sampler(cfg)
        t0 = time.perf_counter()
        for _ in range(asks):
            t = loaded.ask(space)
            loaded.tell(t, 500.0)
        ask_ms = 1e3 * (time.perf_counter() - t0) / asks
        rows.append({"trials": count, "loaded": n_loaded, "fill_s": fill_s, "load_s": load_s, "ask_tell_ms": ask_ms,
                     "journal_mb": path.stat().st_size / 2**20})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", default="1000,10000", help="configurations per launch, comma-separated")
    ap.add_argument("--store", choices=["postgres", "sqlite"], default="postgres")
    ap.add_argument("--search", default="", help="finished trials to ask at, e.g. 1000,10000")
    ap.add_argument("--work", default=None, help="keep everything here (default: a temporary folder)")
    ap.add_argument("--pg", action="append", default=[], metavar="SETTING=VALUE",
                    help="a PostgreSQL setting, e.g. --pg shared_buffers=2GB (repeatable)")
    ap.add_argument("--prefill", type=int, default=0, help="PostgreSQL: first fill the store with this many runs "
                                                          "of another experiment (see prefill)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="grokray-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"# bench_scale {time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}, {os.cpu_count()} CPUs, "
          f"store {args.store}{' ' + ' '.join(args.pg) if args.pg else ''}, work {work}")
    if args.search:
        for row in measure_search([int(x) for x in args.search.split(",")], work):
            print(json.dumps(row), flush=True)
    ns = [int(x) for x in args.n.split(",") if x]
    if not ns:
        return
    if args.store == "sqlite":
        rows = [measure(n, f"sqlite:///{work}/mlflow.db", work, None) for n in ns]
    else:
        from grokray.tracking.local_servers import LocalPostgres, MlflowServer

        with LocalPostgres(settings=dict(kv.split("=", 1) for kv in args.pg)) as pg:
            server = MlflowServer(work / "server", pg.uri, workers=2).start()
            try:
                if args.prefill:
                    seconds = prefill(pg, server.url, args.prefill)
                    size = pg.sql("SELECT pg_size_pretty(pg_database_size('mlflow'))")[0][0]
                    print(f"# prefilled {args.prefill} runs in {seconds:.0f} s; the store: {size}", flush=True)
                rows = []
                for n in ns:
                    rows.append(measure(n, server.url, work, server.proc.pid))
                    print(json.dumps(rows[-1]), flush=True)
            finally:
                server.stop()
    for row in rows:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    for a, b in zip(rows[:-1], rows[1:], strict=True):  # the driver's peak RSS across launches, per 1,000 more
        print(f"driver peak RSS from N={a['n']} to N={b['n']}: "
              f"{(b['driver_peak_mb'] - a['driver_peak_mb']) / (b['n'] - a['n']) * 1000:+.2f} MB per 1,000")
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        print(f"time per configuration at N={last['n']} / at N={first['n']}: "
              f"{last['per_config_ms'] / first['per_config_ms']:.2f}")


if __name__ == "__main__":
    main()
