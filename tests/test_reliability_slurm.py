"""cluster/slurm/grokray.sbatch on a real Slurm (`make reliability`): a throwaway single-host cluster (munged,
slurmctld and two slurmd node entries, gnode1 and gnode2, on 127.0.0.1, all under one temporary directory and its
own slurm.conf), the script submitted with `sbatch` as the README says. Checked: every configuration in MLflow
once, trials placed by Ray on both nodes' steps, the job's output holding grokray's progress lines; a requeued job
resuming its own launch; `scancel` and the time limit's warning signal each stopping the launch as Ctrl-C does
(parent KILLED), then `--resume` completing it with no finished configuration trained twice; nothing of a job left
running after it ends.

Needs Debian's slurmctld, slurmd, slurm-client and munge (.ci/run installs them) and root (the daemons' user);
skips saying why without them."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from test_reliability import children, report, wait_for
from test_reliability_jobs import check_complete, sets

from grokray.spec.build import load_spec
from grokray.supervisor import process_table
from grokray.tracking.local_servers import free_port

pytestmark = pytest.mark.reliability
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "cluster" / "slurm" / "grokray.sbatch"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel")
LONG = ["phases.stop_when_classified=false", "seeds=[0]", "resources.pack_size=1", "train.steps=20000",
        "phases.budget=20000"]  # 8 packs of ~30 s, one at a time: work left for each of three stops
SLURM_CONF = """ClusterName=grokraytest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={root}/munge.sock
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=60
MinJobAge=600
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=gnode1 NodeHostname={host} NodeAddr=127.0.0.1 Port={d1} CPUs={cpus} State=UNKNOWN
NodeName=gnode2 NodeHostname={host} NodeAddr=127.0.0.1 Port={d2} CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=gnode1,gnode2 Default=YES MaxTime=INFINITE State=UP
"""


def missing() -> str | None:
    absent = [d for d in DAEMONS if shutil.which(d, path=f"{os.environ['PATH']}:/usr/sbin") is None]
    if absent:
        return f"not installed: {', '.join(absent)} (Debian: slurmctld slurmd slurm-client munge)"
    if os.geteuid() != 0:
        return "the Slurm daemons run as root here, and this is not root"
    return None


class LocalSlurm:
    """A Slurm of its own: nothing outside `root` is read or written, and stop() ends every daemon it started."""

    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RAY_", "MLFLOW_"))},
                    "SLURM_CONF": str(self.conf), "PATH": f"{os.environ['PATH']}:/usr/sbin"}

    def start(self) -> "LocalSlurm":
        r = self.root
        for d in ("state", "log", "spool/gnode1", "spool/gnode2"):
            (r / d).mkdir(parents=True, exist_ok=True)
        r.chmod(0o755)
        key = r / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self._run(["munged", "--force", f"--socket={r}/munge.sock", f"--key-file={key}", f"--pid-file={r}/munged.pid",
                   f"--seed-file={r}/munge.seed", f"--log-file={r}/log/munged.log"])
        self.conf.write_text(SLURM_CONF.format(host=os.uname().nodename, root=r, ctld_port=free_port(),
                                               d1=free_port(), d2=free_port(), cpus=os.cpu_count() or 2))
        self._run(["slurmctld", "-f", str(self.conf)])
        for node in ("gnode1", "gnode2"):
            self._run(["slurmd", "-f", str(self.conf), "-N", node])
        wait_for(lambda: self.out(["sinfo", "-h", "-o", "%T"]).split() == ["idle"], 60, "both nodes idle", every=1)
        return self

    def _run(self, args: list[str]) -> None:
        done = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (args, done.stdout, done.stderr)

    def out(self, args: list[str]) -> str:
        return subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=60).stdout

    def sbatch(self, *args: str, env: dict) -> str:
        done = subprocess.run(["sbatch", "--parsable", "--partition=debug", "--cpus-per-task=1",
                               f"--output={self.root}/job-%j.out", *args], cwd=ROOT, env={**self.env, **env},
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().split(";")[0]

    def job(self, job: str) -> dict[str, str]:
        text = self.out(["scontrol", "show", "job", "-o", job])
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait_end(self, job: str, timeout: float) -> dict[str, str]:
        return wait_for(lambda: (j := self.job(job)).get("JobState") in ("COMPLETED", "FAILED", "CANCELLED",
                                                                          "TIMEOUT") and j, timeout,
                        f"job {job} to end", every=2)

    def output(self, job: str) -> str:
        path = self.root / f"job-{job}.out"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        """Cancel what still runs and wait for it (its processes need the controller to be ended), then end the
        daemons, then anything of a job's that outlived them."""
        self.out(["scancel", "--partition=debug"])
        try:
            wait_for(lambda: not self.out(["squeue", "-h"]).strip(), 120, "the jobs to end", every=2)
        finally:
            daemons = set()
            for pid_file in self.root.glob("*.pid"):
                try:
                    daemons.add(int(pid_file.read_text().split()[0]))
                except (ValueError, OSError):
                    pass
            table = {pid: ppid for pid, (_, ppid, _, _) in process_table().items()}
            tree, grew = set(daemons), True
            while grew:  # the daemons and everything under them (slurmstepd, a job's steps)
                more = {pid for pid, ppid in table.items() if ppid in tree} - tree
                tree |= more
                grew = bool(more)
            tree |= {int(line.split(":")[0]) for line in leftovers("*", self.root)}
            for pid in tree:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass


def leftovers(job: str, shared: Path) -> list[str]:
    """Processes of the job still alive: its Ray nodes (their temporary directories name the job), its MLflow
    server and its grokray driver (their arguments name the job's shared path)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"/ray-{job}-" in cmd or str(shared) in cmd or (job == "*" and re.search(r"/ray-\d+-\d+-\d+", cmd)):
            found.append(f"{proc.name}: {cmd[:160]}")
    return found


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    reason = missing()
    if reason:
        pytest.skip(f"no local Slurm: {reason}")
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def submit(slurm, shared: Path, *grokray: str, sbatch: tuple = ()) -> str:
    env = {"GROKRAY_SHARED": str(shared), "GROKRAY_HEAD_IP": "127.0.0.1", "GROKRAY_HOME": str(ROOT)}
    return slurm.sbatch(*sbatch, str(SCRIPT), *grokray, env=env)


def parents(uri: str, experiment: str):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], filter_string="tags.`grokray.role` = 'parent'")


def test_a_sweep_runs_on_both_nodes_steps_once_each_and_leaves_nothing(slurm, tmp_path):
    shared = tmp_path / "shared"
    job = submit(slurm, shared, "run", "sweeps/quickstart.yaml", "--scale", "smoke")
    ended = slurm.wait_end(job, 600)
    out = slurm.output(job)
    assert ended["JobState"] == "COMPLETED", out[-3000:]
    uri = f"sqlite:///{shared}/mlflow.db"
    runs = check_complete(uri, load_spec(ROOT / "sweeps" / "quickstart.yaml", scale="smoke"))
    assert len({r.data.tags["grokray.node"] for r in runs.values()}) == 2  # the head's step and the worker's
    assert re.search(r"\[grokray\] \d+/\d+ configurations", out) and "(2 nodes)" in out, out[-3000:]
    assert not leftovers(job, shared), leftovers(job, shared)
    assert not (shared / f".ray-auth-token-{job}").exists()
    report("slurm_sweep", configurations=len(runs), nodes=2)


@pytest.mark.slow(reason="659 s on the 2-core VM: Slurm holds a requeued job about 2 min")
def test_requeue_scancel_and_the_time_limit_each_stop_and_resume_without_training_twice(slurm, tmp_path):
    shared = tmp_path / "shared"
    uri = f"sqlite:///{shared}/mlflow.db"
    spec = load_spec(ROOT / "sweeps" / "quickstart.yaml", LONG, scale="smoke")
    args = ["run", "sweeps/quickstart.yaml", "--scale", "smoke", *sets(LONG), "--max-concurrent", "1",
            "--checkpoint-every", "100"]
    finished: dict[str, int] = {}

    def more_finished():
        server = re.findall(r"MLflow at (http://\S+)", slurm.output(job))
        if not server:  # the job's server makes the store: read it through the server, never beside it
            return False
        try:
            runs = children(server[-1], spec.name)
        except Exception:
            return False
        done = {r.data.tags["grokray.trial_key"]: r.info.end_time for r in runs if r.info.status == "FINISHED"}
        return len(done) > len(finished) and len(done) < len(spec.trials()) and done

    # 1. Submitted without --resume, requeued mid-sweep: the job comes back and continues its own launch.
    job = submit(slurm, shared, *args, sbatch=("--requeue",))
    finished.update(wait_for(more_finished, 600, "a pack finished", every=2))
    slurm.out(["scontrol", "requeue", job])
    # Slurm holds a requeued job for about 2 minutes before it may start again (22.05: not to be shortened)
    wait_for(lambda: re.search(r"\[grokray.sbatch\] grokray run .* --resume", slurm.output(job)), 300,
             "the requeued job to resume its launch", every=2)
    # 2. scancel mid-sweep: grokray stops as on Ctrl-C, the parent ends KILLED, nothing is left running.
    finished.update(wait_for(more_finished, 600, "another pack finished", every=2))
    slurm.out(["scancel", job])
    slurm.wait_end(job, 180)
    last = slurm.output(job).split("[grokray.sbatch] grokray run")[-1]
    assert "SIGTERM (scancel" in last and "--resume" in last, last[-3000:]  # grokray's own resume hint
    assert [p.info.status for p in parents(uri, spec.name)] == ["KILLED"], slurm.output(job)[-3000:]
    wait_for(lambda: not leftovers(job, shared), 30, f"job {job}'s processes to end")
    # 3. Resubmitted with --resume under a 3-minute limit: the warning signal (USR1, 100 s ahead) stops it too.
    job = submit(slurm, shared, *args, "--resume", sbatch=("--time=3", "--signal=B:USR1@100"))
    ended = slurm.wait_end(job, 300)
    out = slurm.output(job)
    assert "time limit near" in out and ended["JobState"] != "TIMEOUT", out[-3000:]
    assert [p.info.status for p in parents(uri, spec.name)] == ["KILLED"], out[-3000:]
    assert not leftovers(job, shared), leftovers(job, shared)
    finished.update({r.data.tags["grokray.trial_key"]: r.info.end_time for r in children(uri, spec.name)
                     if r.info.status == "FINISHED"})
    # 4. Resubmitted with --resume: it completes, and nothing that had finished was trained again.
    job = submit(slurm, shared, *args, "--resume")
    ended = slurm.wait_end(job, 900)
    assert ended["JobState"] == "COMPLETED", slurm.output(job)[-3000:]
    runs = check_complete(uri, spec)
    rerun = [k for k in finished if runs[k].data.tags["grokray.starts"] != "1"]
    assert not rerun, rerun
    # A run that MLflow showed FINISHED after a stop can still be continued by the next job from its last
    # checkpoint when the stop fell between its end and Tune hearing of it (seen in 2 of 3 runs, at the time
    # limit's stop): counted, not asserted, until the trainable closes that window.
    moved = [k for k, end in finished.items() if runs[k].info.end_time != end]
    assert [p.info.status for p in parents(uri, spec.name)] == ["FINISHED"]
    assert not leftovers(job, shared), leftovers(job, shared)
    how = [(runs[k].info.end_time - finished[k], runs[k].data.tags.get("grokray.resumes", "0")) for k in moved]
    report("slurm_stops", configurations=len(runs), finished_before_last_stop=len(finished), re_run=len(rerun),
           end_moved=len(moved), moved_by_ms_and_resumes=how)
