"""Failure injection (`make reliability`): a dead node, a killed driver, a tracking outage, a 2,000-run load.
Each test prints its measured figure as `RELIABILITY <name> key=value ...` (docs/reliability.md quotes them)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from conftest import assert_schedule_and_crossings
from mlflow.tracking import MlflowClient
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from grokray.engine import make_trainer
from grokray.engine.schedule import record_steps
from grokray.plan.expand import expand
from grokray.spec.build import load_spec
from grokray.tracking.local_servers import LocalPostgres, MlflowServer, missing_reason

pytestmark = pytest.mark.reliability
ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"
GROKRAY = Path(sys.executable).with_name("grokray")
FIGURES = Path(os.environ.get("GROKRAY_RELIABILITY_FIGURES", "/tmp/grokray-reliability-figures.jsonl"))


def report(name: str, **figures):
    line = " ".join(f"{k}={v}" for k, v in figures.items())
    print(f"\nRELIABILITY {name} {line}")
    with FIGURES.open("a") as f:
        f.write(json.dumps({"test": name, "date": time.strftime("%Y-%m-%d"), **figures}) + "\n")


def replayed_dir(err: str) -> str:
    """The spool directory the CLI's `deliver them once it is back: grokray replay DIR --tracking-uri ...` names."""
    line = [x for x in err.splitlines() if x.startswith("deliver them once it is back: ")][-1]
    return line.split(" replay ", 1)[1].split(" --tracking-uri")[0]  # `grokray`, or the path that runs it


class Outage:
    """The tracking server stops, from a thread beside the launch, once `ready()` holds (waited for as `what`),
    and starts again `seconds` later (None: it stays down, for the test to start). `ended`: it came back."""

    def __init__(self, server, ready, what: str, seconds: float | None = None):
        self.server, self.ready, self.what, self.seconds = server, ready, what, seconds
        self.start = self.end = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        wait_for(self.ready, 240, self.what, every=1.0)
        self.start = time.time()
        self.server.stop()
        if self.seconds is not None:
            time.sleep(self.seconds)
            self.server.start()
            self.end = time.time()

    @property
    def ended(self) -> bool:
        return self.end is not None

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.thread.join(timeout=120)


def replay_what_was_left(main, code: int, err: str, server) -> str:
    """A launch that ended with the server down: exit 3 and a replay line naming its spool; with the server back,
    the printed replay delivers it. Returns the spool's directory."""
    assert code == 3, err
    spool_dir = replayed_dir(err)
    assert Path(spool_dir).is_dir(), err
    server.start()  # back on the same port and database
    assert main(["replay", spool_dir, "--tracking-uri", server.url]) == 0
    return spool_dir


def wait_for(predicate, timeout: float, what: str, every: float = 0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def children(uri: str, experiment: str = "quickstart"):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return client.search_runs([exp.experiment_id], filter_string="tags.`grokray.role` = 'configuration'",
                              max_results=5000)


def opened(run) -> int:
    """How often a worker trained the run: its start, plus each continuation from a checkpoint."""
    return int(run.data.tags.get("grokray.starts", "1")) + int(run.data.tags.get("grokray.resumes", "0"))


def expected_steps(cfg) -> list[int]:
    total = min(cfg.train.steps, cfg.phases.budget)
    return sorted(record_steps(total, cfg.train.curve_points_per_decade))


def check_complete(uri: str, spec, keys=("train/loss", "val/acc")) -> dict:
    """One FINISHED run per configuration, each series exactly the engine's record schedule (stop_when_classified
    is off in these specs, so every member records its whole schedule). Returns {trial key: run}."""
    runs = children(uri, spec.name)
    by_key = {}
    for r in runs:
        by_key.setdefault(r.data.tags["grokray.trial_key"], []).append(r)
    configs = {c.key(): c for c in spec.trials()}
    assert set(by_key) == set(configs), (len(by_key), len(configs))
    assert all(len(v) == 1 for v in by_key.values()), "duplicate runs"
    client = MlflowClient(uri)
    for key, [run] in by_key.items():
        assert run.info.status == "FINISHED" and "grokray.phase" in run.data.tags, run.info.run_id
        for metric in keys:
            steps = [m.step for m in client.get_metric_history(run.info.run_id, metric)]
            assert_schedule_and_crossings(steps, expected_steps(configs[key]), run)
    return {k: v[0] for k, v in by_key.items()}


# -- an MLflow server we can stop and restart, on SQLite or on a local PostgreSQL ------------------------------------
@pytest.fixture()
def local_ray():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def sweep_options(tmp_path, uri, **kw):
    from grokray.run.options import LaunchOptions

    return LaunchOptions(**{"tracking_uri": uri, "storage": str(tmp_path / "results"), "checkpoint_every": 50,
                           "min_report_s": 1.0, "progress": "never", **kw})


LONG = ["phases.stop_when_classified=false", "resources.pack_size=4", "seeds=[0]"]


# -- 3. tracking outage --------------------------------------------------------------------------------------
# One backend each in CI: the delivery path is the client's on either store, so the outage runs on PostgreSQL (the
# cluster's tracking) and the server that never returns on SQLite (a laptop's); the other pairing is make test-slow.
def _only_in_slow(backend: str, reason: str):
    return pytest.param(backend, marks=pytest.mark.slow(reason=reason))


@pytest.mark.parametrize("server", ["postgres", _only_in_slow(
    "sqlite", "the client's delivery path is the one PostgreSQL's outage runs in CI; the server that never "
    "returns runs on SQLite in CI")], indirect=True)
def test_tracking_outage_of_30s_is_buffered_and_delivered(local_ray, tmp_path, server):
    from grokray.run.grid import run_sweep

    spec = load_spec(QUICKSTART, [*LONG, "train.steps=6000", "phases.budget=6000"], scale="smoke")
    n_configs = len(spec.trials())

    def curves_from_every_pack():
        # Every pack must have opened its runs first: a pack that starts during the outage waits for the
        # server to create them (OPEN_ATTEMPTS), which is not what this test measures.
        runs = children(server.url)
        return len(runs) == n_configs and any(r.data.metrics for r in runs)

    with Outage(server, curves_from_every_pack, "first curves", seconds=30) as outage:
        summary = run_sweep(spec, sweep_options(tmp_path, server.url, max_concurrent=2))
    assert outage.ended, "the sweep ended before the outage did"
    assert summary.errored_trials == 0
    check_complete(server.url, spec)
    assert summary.undelivered_points == 0 and summary.spooled_points > 0  # held back, then delivered
    # training went on during the outage: the time a pack's loop spent in tracking calls (its final delivery
    # aside, which delivery_wait_s bounds) is less than the time the server was away, all of which a pack that
    # waited for it would have spent there. Not a fixed number of seconds: on a loaded host (CI, 2026-12-03) the
    # whole trial's logging and the backlog's delivery (DRAIN_SLICE_S a report) took 18-20 s, the outage 46 s.
    # The rest of its non-training time (checkpoints, Tune reports) depends on the machine's speed, not on the
    # outage: reported, not asserted.
    held = max(m["tracker_s"] - m["delivery_wait_s"] for m in summary.trial_metrics)
    away = outage.end - outage.start
    assert held < away, [round(away, 1)] + [{k: round(m[k], 1) for k in ("trial_s", "train_s", "tracker_s",
                                                                              "delivery_wait_s")}
                                               for m in summary.trial_metrics]
    other = max(m["trial_s"] - m["train_s"] - m["tracker_s"] for m in summary.trial_metrics)
    points = sum(len(expected_steps(c)) * 5 for c in spec.trials())
    report("tracking_outage", outage_s=round(outage.end - outage.start), spooled_points=summary.spooled_points,
           points_lost=0, max_tracking_s=round(held, 1), max_other_non_training_s=round(other, 1),
           configurations=summary.configurations, points_expected=points)


@pytest.mark.parametrize("server", ["sqlite", _only_in_slow(
    "postgres", "the client's delivery path is the one SQLite's runs in CI; the 30-s outage runs on PostgreSQL "
    "in CI")], indirect=True)
def test_tracking_server_that_never_returns(local_ray, tmp_path, server, capsys):
    from grokray.cli import main

    args = ["run", str(QUICKSTART), "--scale", "smoke", *sum((["-s", o] for o in LONG), []),
            "-s", "train.steps=3000", "-s", "phases.budget=3000", "--tracking-uri", server.url,
            "--storage", str(tmp_path / "results"), "--checkpoint-every", "100", "--delivery-wait", "3",
            "--max-concurrent", "2"]
    spec = load_spec(QUICKSTART, [*LONG, "train.steps=3000", "phases.budget=3000"], scale="smoke")

    with Outage(server, lambda: len(children(server.url)) == len(spec.points()), "all runs created"):
        code = main(args)
    err = capsys.readouterr().err
    assert "metric points" in err, err
    replay_what_was_left(main, code, err, server)  # the printed command delivers everything
    check_complete(server.url, spec)
    parent = MlflowClient(server.url).search_runs(
        [children(server.url)[0].info.experiment_id], filter_string="tags.`grokray.role` = 'parent'")[0]
    assert parent.info.status == "FINISHED" and any(k.startswith("phase_count/") for k in parent.data.metrics)
    report("tracking_never_back", exit_code=code, points_lost=0, spool_dir_named=True)


# -- 2. driver loss ------------------------------------------------------------------------------------------
def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def test_driver_sigkill_then_resume(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    overrides = [*LONG, "train.steps=10000", "phases.budget=10000"]  # a pack lasts ~17 s on a quiet VM: the kill
    # lands inside pack 2 (at 3000 steps, ~5 s, it could end before the kill and nothing was resumed)
    args = [str(GROKRAY), "run", str(QUICKSTART), "--scale", "smoke", *sum((["-s", o] for o in overrides), []),
            "--max-concurrent", "1", "--checkpoint-every", "100", "--tracking-uri", uri,
            "--storage", str(tmp_path / "results")]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env["TUNE_GLOBAL_CHECKPOINT_S"] = "1"  # Tune saves its experiment state every second
    first = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        def midway():
            if not list((tmp_path / "results").glob("quickstart_*")):
                return False
            runs = children(uri)
            done = [r for r in runs if "grokray.phase" in r.data.tags]
            return len(done) == 4 and any(r.data.metrics for r in runs if r not in done)

        wait_for(midway, 300, "pack 1 finished and pack 2 logging")
        time.sleep(3)  # Tune's experiment state has seen pack 1 finish
        os.kill(first.pid, signal.SIGKILL)  # the driver only; Ray's processes die with it (fate sharing)
        first.wait(timeout=30)
    finally:
        _kill_group(first)
    before = {r.data.tags["grokray.trial_key"]: r for r in children(uri)}
    finished_before = {k for k, r in before.items() if "grokray.phase" in r.data.tags}
    resumed = subprocess.run([*args, "--resume"], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=400, start_new_session=True)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert f"left RUNNING by a driver that died (pid {first.pid})" in resumed.stderr  # issue 61: said, not silent
    spec = load_spec(QUICKSTART, overrides, scale="smoke")
    runs = check_complete(uri, spec)
    starts = {k: opened(r) for k, r in runs.items()}
    # a kill between a run's phase tag and its end leaves it RUNNING; the resumed launch's close ends it
    ended_before = {k for k in finished_before if before[k].info.status == "FINISHED"}
    rerun = [k for k in finished_before if starts[k] != 1
             or (k in ended_before and runs[k].info.end_time != before[k].info.end_time)]
    assert not rerun, rerun  # finished trials not re-run
    interrupted = [runs[k] for k in runs if k not in finished_before]
    assert all(r.data.tags["grokray.starts"] == "1" and r.data.tags["grokray.resumes"] == "1"
               for r in interrupted)  # the interrupted pack: once more, from its checkpoint
    report("driver_loss", configurations=len(runs), finished_before_kill=len(finished_before),
           re_run=len(rerun), duplicated=0, lost=0, trial_starts=sum(starts.values()))


# SIGKILL's variant is slow (`make test-slow`, a minute of CI's 60): a Ctrl-C also leaves the trials in flight
# RUNNING in the study for the resume to recover, and tests/test_search.py builds that state exactly.
@pytest.mark.parametrize("stop", [pytest.param("sigkill", marks=pytest.mark.slow(
    reason="a minute; Ctrl-C leaves the same RUNNING trials, and test_search.py builds that state exactly")), "ctrl-c"])
def test_search_driver_stop_then_resume(tmp_path, stop):
    """A search killed outright, or stopped with Ctrl-C (issue 52: its parent then closed FINISHED, exit 0, with no
    resume hint), resumes without training a finished trial again."""
    spec_path = ROOT / "sweeps" / "degrok_toy.yaml"
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = [str(GROKRAY), "search", str(spec_path), "--scale", "smoke", "-s", "search.n_trials=6",
            "-s", "search.max_concurrent=1", "-s", "train.steps=1500", "-s", "phases.budget=1500",
            "-s", "phases.stop_when_classified=false", "--tracking-uri", uri, "--storage", str(tmp_path / "results")]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env["TUNE_GLOBAL_CHECKPOINT_S"] = "1"
    first = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
    try:
        def midway():
            runs = children(uri, "degrok-toy")
            done = [r for r in runs if "grokray.phase" in r.data.tags]
            return len(done) >= 2 and len(runs) > len(done)

        wait_for(midway, 400, "two search trials finished and a third running")
        time.sleep(3)
        if stop == "sigkill":
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
        else:  # Ctrl-C: the terminal signals the foreground group
            os.killpg(first.pid, signal.SIGINT)
            out, _ = first.communicate(timeout=180)
            assert first.returncode == 1, out[-2000:]  # stopped early: not 0
            assert "continue it with: " in out, out[-2000:]
            assert out.split("continue it with: ", 1)[1].splitlines()[0].endswith(" --resume"), out[-2000:]
            assert "Stop signal received" not in out and "Failed to fetch metrics" not in out, out[-2000:]
            [parent] = MlflowClient(uri).search_runs([children(uri, "degrok-toy")[0].info.experiment_id],
                                                     "tags.`grokray.role` = 'parent'")
            assert parent.info.status == "KILLED"
    finally:
        _kill_group(first)
    before = {r.data.tags["grokray.trial_key"]: r for r in children(uri, "degrok-toy")}
    finished_before = {k for k, r in before.items() if "grokray.phase" in r.data.tags}
    resumed = subprocess.run([*args, "--resume"], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=500, start_new_session=True)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    runs = children(uri, "degrok-toy")
    keys = [r.data.tags["grokray.trial_key"] for r in runs]
    assert len(keys) == len(set(keys))  # one run per configuration
    by_key = {r.data.tags["grokray.trial_key"]: r for r in runs}
    rerun = [k for k in finished_before if int(by_key[k].data.tags.get("grokray.starts", "1")) != 1
             or by_key[k].info.end_time != before[k].info.end_time]
    assert all(r.info.status == "FINISHED" and "grokray.phase" in r.data.tags for r in runs)
    assert "6 trials" in resumed.stdout, resumed.stdout[-1000:]
    assert not rerun, rerun  # a trial that finished in MLflow is answered from there, not trained again
    study = optuna.load_study(study_name="degrok-toy-smoke", storage=JournalStorage(JournalFileBackend(
        str(tmp_path / "results" / "degrok-toy-smoke.optuna.journal"))))
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 6 and {t.user_attrs["trial_key"] for t in complete} == set(keys)
    number_of = {t.user_attrs["trial_key"]: str(t.number) for t in complete}  # issue 61: the trial that finished it
    assert {k: r.data.tags["grokray.search.trial"] for k, r in by_key.items()} == number_of
    report(f"search_driver_{stop}", trials=len(runs), finished_before_kill=len(finished_before), re_run=len(rerun),
           duplicated=0, recovered_from_mlflow=sum(bool(t.user_attrs.get("recovered_from_mlflow")) for t in complete))


# -- 1. node loss --------------------------------------------------------------------------------------------
def test_node_loss_mid_sweep(tmp_path):
    import ray
    from ray.cluster_utils import Cluster

    from grokray.run.grid import run_sweep

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    overrides = [*LONG, "train.steps=4000", "phases.budget=4000"]
    spec = load_spec(QUICKSTART, overrides, scale="smoke")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    killed = {}

    def kill_one():
        # The node of a pack that is training now, not a fixed one: on a loaded machine one pack may finish or not
        # yet start while the other trains, and the kill must land mid-training either way.
        by_id = {w.node_id: w for w in workers}

        def training_node():
            busy = {r.data.tags.get("grokray.node") for r in children(uri)
                    if r.info.status == "RUNNING" and r.data.metrics}
            return next((by_id[n] for n in busy if n in by_id), None)

        node = wait_for(training_node, 300, "a pack logging on a worker node")
        killed["node_id"] = node.node_id
        killed["at"] = time.time()
        cluster.remove_node(node, allow_graceful=False)

    try:
        killer = threading.Thread(target=kill_one, daemon=True)
        killer.start()
        summary = run_sweep(spec, sweep_options(tmp_path, uri, checkpoint_every=100))
        killer.join(timeout=60)
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert killed, "no node was killed"
    assert summary.errored_trials == 0
    runs = check_complete(uri, spec)
    starts = {k: opened(r) for k, r in runs.items()}
    retried = sum(1 for s in starts.values() if s > 1)
    assert retried >= 1  # the dead node's pack restarted elsewhere
    assert all(r.data.tags["grokray.node"] != killed["node_id"] for r in runs.values() if starts[
        r.data.tags["grokray.trial_key"]] > 1)
    # the retrained packs' phases and crossings equal an undisturbed run of the same pack (the engine alone, same
    # composition); a pack the kill did not touch trained undisturbed already
    plan = expand(spec, slots=2)
    differ = 0
    for pack in [p for p in plan.packs if any(starts[m.key] > 1 for m in p.members)]:
        trainer = make_trainer([m.config for m in pack.members])
        trainer.run()
        for member, result in zip(pack.members, trainer.results(), strict=True):
            run = runs[member.key]
            same = (run.data.tags["grokray.phase"] == result.phase
                    and run.data.metrics.get("final/val/acc") == pytest.approx(result.final["val/acc"], abs=0)
                    and run.data.metrics.get("steps_run") == result.steps_run)
            differ += not same
    assert differ == 0
    assert {r.data.tags["grokray.pack_id"] for r in runs.values()} == {p.pack_id for p in plan.packs}
    report("node_loss", configurations=len(runs), packs=len(plan.packs), retried_configurations=retried,
           lost=0, duplicated=0, phases_differing=differ)


# -- 4. load -------------------------------------------------------------------------------------------------
# skipped at collection, before its module's Ray starts for it (a skip inside the test cost CI 25 s of Ray start-up)
@pytest.mark.skipif(missing_reason() is None, reason="PostgreSQL is here: test_load_through_a_postgres_server "
                                                       "covers this")
def test_load_2000_configurations_through_a_server(local_ray, tmp_path):
    """Where PostgreSQL is missing: the load test on a SQLite-backed server. With PostgreSQL, the test below holds
    everything this one does (every run FINISHED with its phase, every series its whole schedule, counted in SQL),
    and running both cost CI minutes for nothing more."""
    from grokray.run.grid import run_sweep

    srv = MlflowServer(tmp_path, workers=2).start()
    try:
        overrides = ["phases.stop_when_classified=false", "seeds=[0]", "train.steps=20", "phases.budget=20",
                     "model.hidden=[16]", "resources.pack_size=250", "train.curve_points_per_decade=8"]
        spec = load_spec(QUICKSTART, overrides, scale="smoke")
        spec.axes = {"optim.decoder.lr": [10 ** (-4 + 2 * i / 49) for i in range(50)],
                     "optim.decoder.weight_decay": [i * 0.25 for i in range(40)]}
        assert len(spec.points()) == 2000
        t0 = time.time()
        summary = run_sweep(spec, sweep_options(tmp_path, srv.url, min_report_s=5.0))
        wall = time.time() - t0
        assert summary.errored_trials == 0 and summary.configurations == 2000
        client = MlflowClient(srv.url)
        runs = children(srv.url)
        keys = {r.data.tags["grokray.trial_key"] for r in runs}
        assert len(runs) == len(keys) == 2000 and keys == {c.key() for c in spec.trials()}
        assert all(r.info.status == "FINISHED" and "grokray.phase" in r.data.tags for r in runs)
        assert all(r.data.metrics["steps_run"] == 20 for r in runs)  # every run reached its last step
        schedule = expected_steps(spec.first_trial())
        points_each = len(schedule) * 5
        for r in runs[::97]:  # a sample's full histories
            for key in ("train/loss", "train/acc", "val/loss", "val/acc", "weight_norm"):
                steps = [m.step for m in client.get_metric_history(r.info.run_id, key)]
                assert_schedule_and_crossings(steps, schedule, r)
        points = 2000 * points_each
        report("load", configurations=2000, packs=summary.packs, wall_s=round(wall, 1),
               runs_per_s=round(2000 / wall, 1), points=points, points_per_s=round(points / wall),
               machine=f"{os.cpu_count()}-core", server_workers=2)
    finally:
        srv.stop()


@pytest.mark.parametrize("n", [1_000, pytest.param(10_000, marks=pytest.mark.slow(
    reason="10-23 min on the 2-core VM (5,000: 10-23 min in CI, 2026-12-02/03); the same checks run at 1,000 in CI, "
           "and the driver's memory slope is only measured where a launch is long enough to have one"))])
def test_load_through_a_postgres_server(tmp_path, n):
    """The cluster's tracking (an `mlflow server` on PostgreSQL), n configurations of bench_scale's sweep launched
    as a user launches it (`grokray run`, its own process): every run present and FINISHED with its phase, every
    series exactly the engine's record schedule, no point stored twice; the launch's runs table exactly its runs
    read one by one (issue 41). At 10,000 (make test-slow; bench_scale.py measures 10^4-10^5) the driver, sampled
    each second, also grows at most 1 MB per 1,000 configurations while the launch runs: at 1,000 the launch lasts
    a minute or two, and a slope over it is mostly the start-up (tests/test_scale.py holds the close's figure)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_scale import Sampler, rss_slope_per_1000, spec_yaml

    reason = missing_reason()
    if reason:
        pytest.skip(f"no local PostgreSQL: {reason}")
    path = tmp_path / f"scale-{n}.yaml"
    path.write_text(spec_yaml(n))
    light = ["train.steps=20", "phases.budget=20", "train.curve_points_per_decade=8"]  # tracking, not training
    spec = load_spec(path, light)
    assert len(spec.points()) == n
    with LocalPostgres() as pg, MlflowServer(tmp_path, pg.uri, workers=4) as srv:
        log = tmp_path / "launch.log"
        t0 = time.time()
        with log.open("w") as out:
            proc = subprocess.Popen([str(GROKRAY), "run", str(path), "--yes", "--tracking-uri", srv.url,
                                     "--storage", str(tmp_path / "results"), "--progress", "always",
                                     *(a for o in light for a in ("-s", o))],
                                    stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
        sampler = Sampler(proc.pid, log, n)
        sampler.start()
        code = proc.wait(timeout=3000)
        wall = time.time() - t0
        sampler.stop = True
        sampler.join()
        assert code == 0, log.read_text()[-3000:]
        slope = rss_slope_per_1000(sampler.samples, n)
        assert n < 10_000 or slope <= 1.0, f"the driver grew {slope:.2f} MB per 1,000 configurations while it ran"
        role = "(SELECT run_uuid FROM tags WHERE key = 'grokray.role' AND value = 'configuration')"
        rows = pg.sql(f"SELECT r.status, p.value, k.value FROM runs r "
                      f"LEFT JOIN tags p ON p.run_uuid = r.run_uuid AND p.key = 'grokray.phase' "
                      f"LEFT JOIN tags k ON k.run_uuid = r.run_uuid AND k.key = 'grokray.trial_key' "
                      f"WHERE r.run_uuid IN {role}")
        assert len(rows) == n and all(status == "FINISHED" and phase for status, phase, _ in rows)
        assert {key for _, _, key in rows} == {c.key() for c in spec.trials()}  # one run per configuration
        schedule = expected_steps(spec.first_trial())
        series = ("train/loss", "train/acc", "val/loss", "val/acc", "weight_norm")
        per_step = pg.sql(f"SELECT key, step, count(*), count(DISTINCT run_uuid) FROM metrics "
                          f"WHERE run_uuid IN {role} AND key = ANY(%s) GROUP BY key, step", (list(series),))
        stored = {(k, s) for k, s, _, _ in per_step}
        assert {(k, s) for k in series for s in schedule} <= stored  # other steps: crossings (engine.curves)
        assert all(c == runs for _, _, c, runs in per_step), "a point stored twice"
        assert all(c == n for _, s, c, _ in per_step if s in set(schedule)), "a scheduled point missing"
        # Issue 41: the launch's runs table (what analyze and the atlas read) is exactly its runs, one by one
        import pandas as pd

        from analysis.load import load_runs, runs_to_frame
        from grokray.tracking.schema import RUNS_SUMMARY_TAG
        from grokray.tracking.store import Store

        store = Store(srv.url)
        exp_id = store.experiment_id(spec.name)
        [parent] = store.parents([exp_id])
        assert parent.tags[RUNS_SUMMARY_TAG] == str(n) and parent.status == "FINISHED"
        one_by_one = runs_to_frame(store.children_of(parent.run_id, exp_id))
        pd.testing.assert_frame_equal(  # the table is in pack order, the search newest first
            load_runs(parent_run_id=parent.run_id, tracking_uri=srv.url).sort_values("run_id", ignore_index=True),
            one_by_one.sort_values("run_id", ignore_index=True), check_exact=True)
        points = n * len(schedule) * len(series)
        peak = max(r for _, r, _ in sampler.samples) / 2**20
        report("load_postgres", configurations=n, wall_s=round(wall, 1), runs_per_s=round(n / wall, 1),
               points=points, points_per_s=round(points / wall), points_duplicated=0,
               driver_mb_per_1000=round(slope, 2), driver_peak_mb=round(peak, 1),
               machine=f"{os.cpu_count()}-core", server_workers=4)
