"""The README's cluster workflow on one machine (`make reliability`): a Ray head started as cluster.yaml starts it
(token authentication, dashboard on 127.0.0.1, MLFLOW_TRACKING_URI exported to the head's processes), a second
node joined with `ray start --address` (its own raylet and CPU), an `mlflow server` on PostgreSQL, and grokray
submitted with `ray job submit --working-dir .` as the README writes it. Then the failures a cluster user meets: a
worker node killed mid-sweep, and `ray job stop` followed by a resubmitted `--resume`.

Every process a test starts is found through /proc (its process group and their children) and killed at the end;
`ray stop` is never called, since it stops every Ray on the machine."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import assert_schedule_and_crossings
from mlflow.tracking import MlflowClient
from test_reliability import children, report, wait_for

from grokray.engine.schedule import record_steps
from grokray.spec.build import load_spec
from grokray.supervisor import process_table
from grokray.tracking.local_servers import LocalPostgres, MlflowServer, free_port, missing_reason

pytestmark = pytest.mark.reliability
ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LONG = ["phases.stop_when_classified=false", "seeds=[0]", "resources.pack_size=4", "train.steps=4000",
        "phases.budget=4000"]


def _procs() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every live process."""
    return {pid: (ppid, pgrp) for pid, (state, ppid, pgrp, _) in process_table().items() if state != "Z"}


def _group_and_children(pgid: int) -> set[int]:
    """A `ray start`'s daemons (they keep its process group) and everything they spawned (Ray's workers start
    sessions of their own, so the group alone would miss them)."""
    procs = _procs()
    found = {pid for pid, (_, group) in procs.items() if group == pgid}
    grew = True
    while grew:
        more = {pid for pid, (parent, _) in procs.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return found


def _kill(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class RayNodes:
    """A Ray head and worker nodes started with the `ray` CLI, each in its own process group (its handle)."""

    def __init__(self, home: Path, tracking_uri: str):
        self.home = home
        self.temps: list[Path] = []
        self.port, self.dashboard = free_port(), free_port()
        self.api = f"http://127.0.0.1:{self.dashboard}"
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_"))},
                    "HOME": str(home), "PATH": f"{BIN}:{os.environ['PATH']}", "RAY_AUTH_MODE": "token",
                    "PYTHONUNBUFFERED": "1"}
        self.tracking_uri = tracking_uri
        self.groups: list[int] = []

    def _start(self, args: list[str], env: dict) -> int:
        # A temporary directory per node, as on separate machines: nodes sharing one would share their runtime
        # environments' files, and one node's agent replaces the job's working directory under another's driver.
        # Short, for Ray's socket paths (107 bytes at most).
        # Likewise a port of its own for the node's dashboard agent (the job server's hands; default 52365).
        self.temps.append(Path(tempfile.mkdtemp(prefix="grj-")))
        args = [*args, f"--temp-dir={self.temps[-1]}", f"--dashboard-agent-listen-port={free_port()}"]
        proc = subprocess.Popen([str(BIN / "ray"), "start", *args, "--disable-usage-stats"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.groups.append(proc.pid)  # the CLI's pid is its daemons' process group: recorded before anything fails
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, out[-4000:]
        return proc.pid

    def start_head(self) -> int:
        # As cluster.yaml: the token generated once (`ray get-auth-token --generate`, into ~/.ray/auth_token),
        # MLFLOW_TRACKING_URI exported for the head's processes, the dashboard on 127.0.0.1.
        subprocess.run([str(BIN / "ray"), "get-auth-token", "--generate"], env=self.env, check=True,
                       capture_output=True, timeout=120)
        assert (self.home / ".ray" / "auth_token").stat().st_size > 0
        return self._start(["--head", "--node-ip-address=127.0.0.1", f"--port={self.port}",
                            "--dashboard-host=127.0.0.1", f"--dashboard-port={self.dashboard}", "--num-cpus=1"],
                           {**self.env, "MLFLOW_TRACKING_URI": self.tracking_uri, "RAY_JOB_STOP_WAIT_TIME_S": "60"})

    def add_node(self) -> int:
        return self._start([f"--address=127.0.0.1:{self.port}", "--num-cpus=1"], self.env)

    def node_id(self, group: int) -> str:
        for pid in _group_and_children(group):
            try:
                args = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if args and args[0].endswith(b"/raylet"):
                return next(a for a in args if a.startswith(b"--node_id=")).split(b"=", 1)[1].decode()
        raise AssertionError(f"no raylet in process group {group}")

    def kill(self, group: int) -> None:
        """The node dies at once: its raylet, agents and workers get SIGKILL (what a lost machine looks like)."""
        _kill(_group_and_children(group))

    def stop(self) -> None:
        """Every node's processes; twice, for a worker a raylet was starting while the first pass ran."""
        for _ in range(2):
            _kill({pid for group in self.groups for pid in _group_and_children(group)})
            time.sleep(1)

    def job(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """`ray job ARGS...` against the head's dashboard, as a user's shell would run it (from the checkout)."""
        deadline = time.time() + 120
        while True:
            done = subprocess.run([str(BIN / "ray"), "job", *args[:1], "--address", self.api, *args[1:]], cwd=ROOT,
                                  env=self.env, capture_output=True, text=True, timeout=timeout)
            # a head just started may not have its job agent yet: Ray answers "please try again later"
            if "No available agent to submit job" not in done.stdout + done.stderr or time.time() > deadline:
                return done
            time.sleep(2)

    def status(self, job_id: str) -> str:
        """The job's state as `ray job status` words it (a terminal state in a banner, others in a line)."""
        done = self.job("status", job_id, timeout=60)
        text = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)
        for words, state in (("succeeded", "SUCCEEDED"), ("was stopped", "STOPPED"), ("failed", "FAILED")):
            if f"Job '{job_id}' {words}" in text:
                return state
        found = re.search(rf"Status for job '{job_id}': (\w+)", text)
        return found.group(1) if found else "UNKNOWN"

    def wait_job(self, job_id: str, timeout: float) -> str:
        return wait_for(lambda: (s := self.status(job_id)) in ("SUCCEEDED", "FAILED", "STOPPED") and s, timeout,
                        f"job {job_id} to end")


@pytest.fixture()
def cluster(tmp_path):
    """Head + one worker node (1 CPU each) on a token-authenticated Ray, beside an `mlflow server` on PostgreSQL."""
    reason = missing_reason()
    if reason:
        pytest.skip(f"no local PostgreSQL: {reason}")
    if not (BIN / "ray").exists():
        pytest.skip("no `ray` CLI beside this Python")
    home = tmp_path / "home"
    home.mkdir()
    with LocalPostgres() as pg, MlflowServer(tmp_path / "mlflow", pg.uri, workers=2) as server:
        nodes = RayNodes(home, server.url)
        try:
            nodes.head = nodes.start_head()
            nodes.worker = nodes.add_node()
            nodes.server, nodes.shared = server, tmp_path / "shared"
            yield nodes
        finally:
            nodes.stop()
            for temp in nodes.temps:
                subprocess.run(["rm", "-rf", str(temp)], check=False)


def check_complete(uri: str, spec) -> dict:
    """One FINISHED run with a phase per configuration, each curve its schedule once plus its crossing steps."""
    runs = children(uri, spec.name)
    keys = [r.data.tags["grokray.trial_key"] for r in runs]
    assert len(keys) == len(set(keys)), "duplicate runs"
    assert set(keys) == {c.key() for c in spec.trials()}
    configs = {c.key(): c for c in spec.trials()}
    client = MlflowClient(uri)
    for run in runs:
        assert run.info.status == "FINISHED" and "grokray.phase" in run.data.tags, run.info.run_id
        cfg = configs[run.data.tags["grokray.trial_key"]]
        total = min(cfg.train.steps, cfg.phases.budget)
        if not cfg.phases.stop_when_classified:
            steps = [m.step for m in client.get_metric_history(run.info.run_id, "val/acc")]
            assert_schedule_and_crossings(steps, sorted(record_steps(total, cfg.train.curve_points_per_decade)), run)
    return {r.data.tags["grokray.trial_key"]: r for r in runs}


def sets(overrides: list[str]) -> list[str]:
    return sum((["-s", o] for o in overrides), [])


def parents(uri: str, experiment: str):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], filter_string="tags.`grokray.role` = 'parent'")


def test_a_job_runs_on_both_nodes_and_a_worker_node_killed_mid_job_loses_nothing(cluster):
    """The README's `ray job submit` of a sweep: its driver finds the head's MLFLOW_TRACKING_URI, its packs train
    on both nodes, its log has the plain progress lines, Tune's results land on the shared path, and a client
    without the cluster's token is refused. The worker node is then killed (SIGKILL) while its pack trains: the job
    still succeeds with every configuration once, every point once, the lost pack retrained on the head."""
    stranger = cluster.shared / "stranger"  # a client without the cluster's token is refused
    stranger.mkdir(parents=True)
    refused = subprocess.run([str(BIN / "ray"), "job", "list", "--address", cluster.api], cwd=ROOT,
                             env={**cluster.env, "HOME": str(stranger)}, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "authentication token" in (refused.stdout + refused.stderr).lower()
    spec = load_spec(ROOT / "sweeps" / "quickstart.yaml", LONG, scale="smoke")
    storage = cluster.shared / "grokray-results"
    submitted = cluster.job("submit", "--no-wait", "--submission-id", "grokray-node-loss", "--working-dir", ".",
                            "--", "grokray", "run", "sweeps/quickstart.yaml", "--scale", "smoke", *sets(LONG),
                            "--checkpoint-every", "100", "--storage", str(storage))
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    head, worker = cluster.node_id(cluster.head), cluster.node_id(cluster.worker)

    def both_logging():
        runs = children(cluster.server.url, spec.name)  # the head's MLFLOW_TRACKING_URI reached the job's driver
        logging = {r.data.tags.get("grokray.node") for r in runs if r.data.metrics}
        return len(runs) == len(spec.points()) and logging == {head, worker}

    wait_for(both_logging, 400, "both nodes' packs logging")
    cluster.kill(cluster.worker)  # the worker node's raylet, agents and trial processes: SIGKILL
    ended = cluster.wait_job("grokray-node-loss", 900)
    logs = cluster.job("logs", "grokray-node-loss").stdout
    assert ended == "SUCCEEDED", logs[-3000:]
    assert "[grokray] " in logs and " configurations | " in logs, logs[-3000:]  # plain progress lines in the log
    assert list(storage.glob("quickstart_*")), "Tune's results are on the shared path"
    runs = check_complete(cluster.server.url, spec)  # every configuration once, every curve point once
    starts = {k: int(r.data.tags["grokray.starts"]) + int(r.data.tags.get("grokray.resumes", "0"))
              for k, r in runs.items()}  # trained again from step 0, or continued from a checkpoint
    retried = [k for k, n in starts.items() if n > 1]
    assert retried and all(runs[k].data.tags["grokray.node"] == head for k in retried)
    assert [p.info.status for p in parents(cluster.server.url, spec.name)] == ["FINISHED"]
    report("job_node_loss", nodes=2, configurations=len(runs), runs=len(runs), nodes_killed=1,
           retried_configurations=len(retried), duplicated=0, lost=0, token_auth="on")


@pytest.mark.slow(reason="6-7 min in CI: `ray job stop` signals the driver as a batch scheduler does (SIGTERM), which "
                         "test_run::test_sigterm_stops_a_sweep_as_ctrl_c_does checks, and the resume after a stop is "
                         "test_reliability_never_waits' Ctrl-C resume")
def test_ray_job_stop_then_resume_keeps_every_finished_trial(cluster):
    spec = load_spec(ROOT / "sweeps" / "quickstart.yaml", LONG, scale="smoke")
    args = ["--working-dir", ".", "--", "grokray", "run", "sweeps/quickstart.yaml", "--scale", "smoke", *sets(LONG),
            "--max-concurrent", "1", "--checkpoint-every", "100", "--storage", str(cluster.shared / "grokray-results")]
    assert cluster.job("submit", "--no-wait", "--submission-id", "grokray-first", *args).returncode == 0

    def one_pack_done_and_the_next_logging():
        runs = children(cluster.server.url, spec.name)
        done = [r for r in runs if "grokray.phase" in r.data.tags]
        return len(done) == 4 and any(r.data.metrics for r in runs if r not in done)

    wait_for(one_pack_done_and_the_next_logging, 400, "pack 1 finished and pack 2 logging")
    before = {r.data.tags["grokray.trial_key"]: r for r in children(cluster.server.url, spec.name)}
    finished = {k: r.info.end_time for k, r in before.items() if "grokray.phase" in r.data.tags}
    stopped = cluster.job("stop", "grokray-first", timeout=120)
    assert stopped.returncode == 0, stopped.stdout[-2000:] + stopped.stderr[-2000:]
    assert cluster.wait_job("grokray-first", 120) == "STOPPED"
    logs = cluster.job("logs", "grokray-first").stdout
    assert "grokray: interrupted" in logs or "--resume" in logs, logs[-3000:]  # stopped as Ctrl-C stops it
    assert len(finished) == 4
    assert [p.info.status for p in parents(cluster.server.url, spec.name)] == ["KILLED"]

    resumed = cluster.job("submit", "--submission-id", "grokray-resumed", *args, "--resume")
    assert resumed.returncode == 0 and "succeeded" in resumed.stdout, resumed.stdout[-3000:]
    runs = check_complete(cluster.server.url, spec)
    rerun = [k for k, end in finished.items() if runs[k].info.end_time != end
             or runs[k].data.tags["grokray.starts"] != "1"]
    assert not rerun, rerun
    assert [p.info.status for p in parents(cluster.server.url, spec.name)] == ["FINISHED"]
    report("job_stop_resume", configurations=len(runs), finished_before_stop=len(finished), re_run=len(rerun),
           lost=0, duplicated=0)


@pytest.mark.slow(reason="4-5 min in CI: a search's journal and an atlas's pages go where --storage and -o say on "
                         "any machine (make launches checks both); the job above writes to the shared path")
def test_search_and_atlas_jobs_keep_their_journal_and_pages_on_the_shared_path(cluster):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = cluster.shared / "grokray-results"
    search = cluster.job("submit", "--working-dir", ".", "--", "grokray", "search", "sweeps/degrok_toy.yaml",
                         "--scale", "smoke", "--storage", str(storage))
    assert search.returncode == 0 and "succeeded" in search.stdout, search.stdout[-3000:]
    journal = storage / "degrok-toy-smoke.optuna.journal"
    study = optuna.load_study(study_name="degrok-toy-smoke", storage=JournalStorage(JournalFileBackend(str(journal))))
    trials = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    runs = children(cluster.server.url, "degrok-toy")
    assert len(trials) == len(runs) == 3
    assert {t.user_attrs["trial_key"] for t in trials} == {r.data.tags["grokray.trial_key"] for r in runs}

    pages = cluster.shared / "atlas"
    atlas = cluster.job("submit", "--working-dir", ".", "--", "grokray", "atlas", "--scale", "smoke",
                        "sweeps/quickstart.yaml", "-o", str(pages), "--storage", str(storage))
    assert atlas.returncode == 0 and "succeeded" in atlas.stdout, atlas.stdout[-3000:]
    page = (pages / "quickstart-smoke.md").read_text()
    assert "8 configurations" in page or "configurations: 8" in page, page[:2000]
    assert list((pages / "img").glob("quickstart-smoke*.png"))
    spec = load_spec(ROOT / "sweeps" / "quickstart.yaml", scale="smoke")
    assert len(children(cluster.server.url, spec.name)) == len(spec.points())
    report("job_search_atlas", search_trials=len(trials), atlas_pages=1, journal_on_shared=True)
