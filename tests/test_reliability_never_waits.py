"""Training never waits for tracking, and every stop is clean (`make reliability`).

- a tracking server that is down from the start: every configuration trains while it is down, the launch exits 3
  with the replay line, no worker slot waits after its trial, and the replay makes the parent and every child;
- an adaptive sweep's rounds start while the server is down; a search's trials are linked to the runs the replay
  makes;
- Ctrl-C then --resume: no configuration is started twice (a continued run counts a resume, not a start);
- SIGTERM to the whole process group: the parent ends KILLED, and nothing of the launch is left 60 s later;
- bad input that would have touched the store or the machine: one line, exit 2, no file.
"""

import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState
from test_reliability import check_complete, replayed_dir, report, sweep_options, wait_for
from test_reliability_drivers import adaptive_spec, check_children, search_overrides

from grokray.spec.build import load_spec
from grokray.supervisor import process_table, session_members
from grokray.terminal import launch_end

pytestmark = pytest.mark.reliability
ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"
DEGROK = ROOT / "sweeps" / "degrok_toy.yaml"
GROKRAY = Path(sys.executable).with_name("grokray")
LONG = ["phases.stop_when_classified=false", "resources.pack_size=4", "seeds=[0]"]


@pytest.fixture()
def server(tmp_path):
    """An `mlflow server` on 127.0.0.1 over SQLite, stopped and started by the test (the outage tests of
    test_reliability.py run the same delivery path on PostgreSQL too; these keep CI's time down)."""
    from grokray.tracking.local_servers import MlflowServer

    srv = MlflowServer(tmp_path).start()
    yield srv
    srv.stop()


def parents(uri: str, experiment: str) -> list:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], filter_string="tags.`grokray.role` = 'parent'") if exp else []


def test_a_launch_whose_server_is_down_from_the_start_trains_everything(local_ray, tmp_path, server):
    from grokray.cli import main
    from grokray.run.grid import run_sweep

    spec = load_spec(QUICKSTART, [*LONG, "train.steps=1500", "phases.budget=1500"], scale="smoke")
    server.stop()  # down before the launch: no experiment, no parent
    t0 = time.time()
    # the launch's end retries for --delivery-wait; the server stays down, so a short wait shows the same (issue 69)
    summary = run_sweep(spec, sweep_options(tmp_path, server.url, max_concurrent=2, delivery_wait_s=3))
    wall = time.time() - t0
    out, err = launch_end(summary, spec.name)
    assert summary.exit_code == 3 and summary.errored_trials == 0 and not summary.interrupted, err
    assert summary.phase_counts and sum(summary.phase_counts.values()) == len(spec.trials())  # from Tune
    spool = replayed_dir("\n".join(err))
    # no slot waited out the outage after its trial: one try, then the file is the driver's
    idle = [m["delivery_wait_s"] for m in summary.trial_metrics]
    assert max(idle) < 5, idle
    assert [p.name for p in Path(spool).glob("launch-*.jsonl")]  # the parent's creation waits in the spool
    server.start()
    assert main(["replay", spool, "--tracking-uri", server.url]) == 0
    check_complete(server.url, spec)
    [parent] = parents(server.url, spec.name)
    assert parent.info.status == "FINISHED"
    counts = {k.split("/", 1)[1]: int(v) for k, v in parent.data.metrics.items() if k.startswith("phase_count/")}
    assert counts == summary.phase_counts
    spec_text = MlflowClient(server.url).download_artifacts(parent.info.run_id, "spec.resolved.yaml")
    assert Path(spec_text).read_text().startswith("name: quickstart")
    # the replay ends the record as a close that reached the store would have (issue 52): the runs table, the
    # description, the phase diagram, the counts as tags; no folder left, and a second replay has nothing to do
    tags = parent.data.tags
    assert tags["grokray.summary_rows"] == str(len(spec.trials()))
    assert tags["mlflow.note.content"].startswith("**quickstart**: grid launch finished")
    assert {k: int(v) for k, v in tags.items() if k.startswith("grokray.phase_count.")} == {
        f"grokray.phase_count.{p}": n for p, n in summary.phase_counts.items()}
    figures = {a.path for a in MlflowClient(server.url).list_artifacts(parent.info.run_id, "analysis")}
    assert "analysis/phase_diagram.png" in figures
    assert not Path(spool).exists()
    assert main(["replay", spool, "--tracking-uri", server.url]) == 0
    report("server_down_from_the_start", configurations=len(spec.trials()), wall_s=round(wall),
           delivery_wait_s=3, max_idle_slot_s=round(max(idle), 2), exit_code=summary.exit_code, points_lost=0)


def test_an_adaptive_round_starts_during_an_outage(local_ray, tmp_path, server):
    from grokray.cli import main
    from grokray.run.adaptive import run_adaptive

    spec = adaptive_spec(600)
    server.stop()
    summary = run_adaptive(spec, sweep_options(tmp_path, server.url, max_concurrent=2, delivery_wait_s=3))
    assert summary.rounds >= 2 and not summary.interrupted and summary.exit_code == 3, summary.rounds_log
    server.start()
    assert main(["replay", summary.undelivered_dir, "--tracking-uri", server.url]) == 0
    [parent] = parents(server.url, spec.name)
    client = MlflowClient(server.url)
    records = [a.path for a in client.list_artifacts(parent.info.run_id, "adaptive")]
    assert len(records) == summary.rounds, records
    check_children(server.url, spec, summary.configurations)
    report("adaptive_rounds_during_outage", rounds=summary.rounds, configurations=summary.configurations)


def test_after_a_replay_every_search_trial_has_its_run(local_ray, tmp_path, server):
    from grokray.cli import main
    from grokray.search.config import parse_search
    from grokray.search.launch.driver import run_search
    from grokray.search.study import trial_run_ids

    spec = load_spec(DEGROK, search_overrides(600), scale="smoke")
    server.stop()
    summary = run_search(spec, sweep_options(tmp_path, server.url, max_concurrent=2, delivery_wait_s=3,
                                             min_report_s=None))
    assert summary.exit_code == 3 and summary.completed == 6
    server.start()
    assert main(["replay", summary.undelivered_dir, "--tracking-uri", server.url]) == 0
    cfg = parse_search(spec)
    study = optuna.load_study(study_name=cfg.study, storage=JournalStorage(JournalFileBackend(
        str(tmp_path / "results" / f"{cfg.study}.optuna.journal"))))
    client = MlflowClient(server.url)
    trained = [t for t in study.trials if t.state == TrialState.COMPLETE and "duplicate_of" not in t.user_attrs]
    assert trained
    for t in trained:
        ids = trial_run_ids(study.user_attrs, t).split(",")
        assert all(ids) and len(ids) == len(spec.seeds), (t.number, ids)
        for run_id in ids:
            assert client.get_run(run_id).data.tags["grokray.search.trial"] == str(t.number)
    report("search_links_after_replay", trials=len(trained), linked=len(trained))


def _cli_env(supervised: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env.pop("GROKRAY_SUPERVISE", None) if supervised else env.update(GROKRAY_SUPERVISE="0")
    env["TUNE_GLOBAL_CHECKPOINT_S"] = "1"
    return env


def _midway(uri: str, name: str):
    """A pack finished and another training: a stop lands between them."""
    def check():
        client = MlflowClient(uri)
        exp = client.get_experiment_by_name(name)
        runs = client.search_runs([exp.experiment_id], "tags.`grokray.role` = 'configuration'") if exp else []
        packs: dict[str, list] = {}
        for r in runs:
            packs.setdefault(r.data.tags["grokray.pack_id"], []).append(r)
        done = [p for p, rs in packs.items() if all("grokray.phase" in r.data.tags for r in rs)]
        training = [p for p, rs in packs.items() if not any("grokray.phase" in r.data.tags for r in rs)
                    and any(r.data.metrics for r in rs)]
        return done and training
    return check


def _run_args(tmp_path, uri: str, overrides: list[str]) -> list[str]:
    return [str(GROKRAY), "run", str(QUICKSTART), "--scale", "smoke", *sum((["-s", o] for o in overrides), []),
            "--max-concurrent", "1", "--checkpoint-every", "100", "--report-every", "1", "--tracking-uri", uri,
            "--storage", str(tmp_path / "results")]


def test_ctrl_c_then_resume_starts_no_configuration_twice(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    overrides = [*LONG, "train.steps=8000", "phases.budget=8000"]
    args = _run_args(tmp_path, uri, overrides)
    first = subprocess.Popen(args, cwd=tmp_path, env=_cli_env(True), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(_midway(uri, "quickstart"), 400, "a pack finished and the next training")
        os.killpg(first.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the foreground group
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert first.returncode == 1 and "Tuner.restore" not in err, err[-2000:]  # one voice: grokray's own hint
    hint = err.split("continue it with: ", 1)[1].splitlines()[0]  # the command to paste, -s flags and all
    assert hint.endswith(" --resume") and "-s train.steps=8000" in hint, hint
    spec = load_spec(QUICKSTART, overrides, scale="smoke")
    before = {r.data.tags["grokray.trial_key"]: r for r in MlflowClient(uri).search_runs(
        [parents(uri, spec.name)[0].info.experiment_id], "tags.`grokray.role` = 'configuration'")}
    finished = {k for k, r in before.items() if "grokray.phase" in r.data.tags}
    assert finished and len(finished) < len(spec.trials())
    assert all(r.info.status == "KILLED" for k, r in before.items() if k not in finished)
    command = shlex.split(hint)
    command[0] = str(GROKRAY) if command[0] == "grokray" else command[0]
    assert command == [str(GROKRAY), *args[1:], "--resume"]
    resumed = subprocess.run(command, cwd=tmp_path, env=_cli_env(True), capture_output=True, text=True,
                             timeout=600, start_new_session=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    runs = check_complete(uri, spec)
    starts = {k: r.data.tags.get("grokray.starts") for k, r in runs.items()}
    assert set(starts.values()) == {"1"}, starts
    assert all("grokray.resumes" not in runs[k].data.tags for k in finished)  # not even opened again
    resumes = sum(int(r.data.tags.get("grokray.resumes", "0")) for r in runs.values())
    assert resumes >= 1  # the interrupted pack went on from its checkpoint
    report("ctrl_c_then_resume", configurations=len(runs), finished_before=len(finished), started_twice=0,
           continued=resumes)


def test_ctrl_c_during_an_atlas_piece_writes_no_page_and_says_how_to_resume(tmp_path):
    """Issue 52: a stopped `grokray atlas` wrote its figure's page from the part of the piece that had run (wall
    time cut short, runs 'stopped before classified'), and Ray Tune's own stop line spoke beside grokray's."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    out = tmp_path / "pages"
    args = [str(GROKRAY), "atlas", "--scale", "smoke", str(QUICKSTART), *sum((["-s", o] for o in [
            *LONG, "train.steps=20000", "phases.budget=20000"]), []), "-o", str(out), "--tracking-uri", uri,
            "--storage", str(tmp_path / "results"), "--progress", "never"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=_cli_env(True), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        def training():
            if not list((tmp_path / "results").rglob("quickstart_*")):  # Tune's run has begun: the store is made
                return False
            exp = MlflowClient(uri).get_experiment_by_name("quickstart")
            runs = MlflowClient(uri).search_runs([exp.experiment_id], "tags.`grokray.role` = 'configuration'") \
                if exp else []
            return any(r.data.metrics for r in runs)
        wait_for(training, 300, "the piece's first curves")
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, err[-2000:]
    assert "the atlas stopped in quickstart piece" in err and "wrote no page" in err, err[-2000:]
    assert "grokray: stopping: " in err and "Stop signal received" not in err, err[-2000:]
    assert not list(out.glob("*.md")) and not list(out.glob("*.json"))  # no page, no data, no index
    [parent] = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("quickstart").experiment_id],
                                             "tags.`grokray.role` = 'parent'")
    assert parent.info.status == "KILLED"  # the next `grokray atlas` resumes it (test_atlas.py)


def test_ctrl_c_during_the_delivery_wait_ends_the_wait(tmp_path, server):
    """Issue 52: Ctrl-C while the close retried a server that was away was ignored for 29 s. Now the wait is said
    as it starts, and Ctrl-C ends it: exit 3 with the replay line, what is left waiting in the spool."""
    server.stop()
    args = [str(GROKRAY), "run", str(QUICKSTART), "--scale", "smoke", "-s", "seeds=[1]", "--tracking-uri", server.url,
            "--storage", str(tmp_path / "results"), "--delivery-wait", "120", "--progress", "never"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=_cli_env(True), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    err_lines: list[str] = []
    reader = threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("is not answering; retrying the held-back metrics" in x for x in err_lines), 300,
                 "the close's delivery wait")
        t0 = time.time()
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
        waited = time.time() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(timeout=10)
    err = "".join(err_lines)
    assert proc.returncode == 3, err[-2000:]
    assert waited < 15, waited  # not the 120 s the wait allowed
    spool = replayed_dir(err)
    assert Path(spool).is_dir()
    server.start()
    from grokray.cli import main

    assert main(["replay", spool, "--tracking-uri", server.url]) == 0
    check_complete(server.url, load_spec(QUICKSTART, ["seeds=[1]"], scale="smoke"))
    report("ctrl_c_in_delivery_wait", stopped_s=round(waited, 1), exit_code=proc.returncode)


def _ours(pid: int) -> set[int]:
    """The processes of a launch whose CLI process is `pid`: its session, and its driver's (a child of the CLI
    that leads a session of its own)."""
    sessions = {pid, *(p for p, (_, ppid, _, _) in process_table().items() if ppid == pid)}
    return {p for s in sessions for p in session_members(s)}


def test_sigterm_to_the_process_group_stops_cleanly_and_leaves_nothing(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    overrides = [*LONG, "train.steps=4000", "phases.budget=4000"]
    proc = subprocess.Popen(_run_args(tmp_path, uri, overrides), cwd=tmp_path, env=_cli_env(True),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(_midway(uri, "quickstart"), 400, "a pack finished and the next training")
        launch = _ours(proc.pid)
        assert len(launch) > 3  # the CLI, its driver, Ray's processes and a worker
        t0 = time.time()
        os.killpg(proc.pid, signal.SIGTERM)  # what `timeout`, systemd and `kill -- -PGID` send
        _, err = proc.communicate(timeout=90)
        stopped_s = time.time() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert any("continue it with: " in line and line.endswith(" --resume") for line in err.splitlines()), err[-2000:]
    [parent] = parents(uri, "quickstart")
    assert parent.info.status == "KILLED"
    runs = MlflowClient(uri).search_runs([parent.info.experiment_id], "tags.`grokray.role` = 'configuration'")
    assert not [r.info.run_id for r in runs if r.info.status == "RUNNING"]
    wait_for(lambda: not [p for p in launch if Path(f"/proc/{p}").exists()], max(1.0, 60 - stopped_s),
             "every process of the launch to end")
    report("sigterm_to_the_group", stopped_s=round(stopped_s, 1), processes=len(launch), left=0,
           parent=parent.info.status)


@pytest.mark.parametrize("bad, needle", [
    (["-s", "model.hidden=[1e9,200]"], "does not fit"),
    (["-s", "train.steps=1e15"], "train.steps"),  # past its bound: one line, no cost estimate
    ([], "is a directory"),
])
def test_bad_input_gives_one_line_exit_2_and_no_file(tmp_path, monkeypatch, capsys, bad, needle):
    from grokray.cli import main

    monkeypatch.chdir(tmp_path)
    spec = str(ROOT / "sweeps") if not bad else str(QUICKSTART)
    t0 = time.time()
    code = main(["run", spec, "--scale", "smoke", *bad])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("grokray: error:") and needle in err[0], err
    assert not list(tmp_path.iterdir())  # no mlflow.db, no results directory
    report("bad_input", needle=needle.replace(" ", "_"), refused_s=round(time.time() - t0, 1))
