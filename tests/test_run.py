"""`grokray run` end to end on a real local Ray (started once for the module) and real MLflow stores."""

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from grokray.plan.expand import expand
from grokray.spec.build import load_spec

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"


def _options(tmp_path, uri, **kw):
    from grokray.run.options import LaunchOptions

    return LaunchOptions(tracking_uri=uri, storage=str(tmp_path / "results"), checkpoint_every=100,
                        min_report_s=0.0, progress="never", **kw)


def check_tracking(summary, spec):
    """One child per configuration with params, phase tag, curves and summaries; parent counts match."""
    client = MlflowClient(summary.tracking_uri)
    children = client.search_runs([summary.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{summary.parent_run_id}'",
                                  max_results=1000)
    expected = {t.key() for t in spec.trials()}
    keys = [r.data.tags["grokray.trial_key"] for r in children]
    assert len(keys) == len(set(keys)) == len(expected) and set(keys) == expected
    counts = {}
    for run in children:
        data = run.data
        assert data.params["optim.decoder.lr"] and data.params["task.p"] and "seed" in data.params
        assert data.tags["grokray.phase"] in ("comprehension", "grokking", "memorization", "confusion",
                                              "diverged", "val_without_train") or data.tags["grokray.phase"]
        assert {"grokray.model", "grokray.task", "grokray.pack_id", "grokray.spec_hash"} <= set(data.tags)
        assert "steps_run" in data.metrics and "final/val/acc" in data.metrics
        history = client.get_metric_history(run.info.run_id, "val/acc")
        steps = [m.step for m in history]
        assert len(steps) > 10 and steps == sorted(set(steps)) and steps[0] == 0
        assert run.info.run_name.startswith("lr=") and run.info.status == "FINISHED"
        counts[data.tags["grokray.phase"]] = counts.get(data.tags["grokray.phase"], 0) + 1
    parent = client.get_run(summary.parent_run_id)
    assert parent.info.status == "FINISHED"
    assert {k: int(v) for k, v in parent.data.metrics.items()} == {f"phase_count/{p}": n for p, n in counts.items()}
    assert {k: int(v) for k, v in parent.data.tags.items() if k.startswith("grokray.phase_count.")} == {
        f"grokray.phase_count.{p}": n for p, n in counts.items()}
    assert summary.phase_counts == dict(sorted(counts.items()))
    assert "spec.resolved.yaml" in [a.path for a in client.list_artifacts(summary.parent_run_id)]
    return counts


@pytest.mark.launch  # a real launch on Ray: make launches (issue 69: make test stays the quick loop)
def test_smoke_sweep_on_local_ray(local_ray, tmp_path):
    from grokray.run.grid import run_sweep

    spec = load_spec(QUICKSTART, scale="smoke")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    summary = run_sweep(spec, _options(tmp_path, uri))
    assert summary.errored_trials == 0
    counts = check_tracking(summary, spec)
    assert sum(counts.values()) == len(spec.points())
    plan = expand(spec, slots=2)  # what --dry-run prints on this 2-CPU Ray
    assert (summary.configurations, summary.packs) == (plan.n_configs, len(plan.packs))
    assert len(summary.trial_metrics) == len(plan.packs)
    t = summary.timings  # Ray was already up (the shared fixture), so this run neither started nor stopped it
    assert set(t) == {"ray_start", "setup", "tune", "finish", "report"} and t["ray_start"] < 1.0
    assert min(t.values()) >= 0 and t["tune"] > max(x["trial_s"] for x in summary.trial_metrics)
    assert sum(t.values()) <= summary.wall_s + 1e-6


@pytest.mark.launch  # a real launch on Ray: make launches (issue 69: make test stays the quick loop)
def test_dry_run_counts_match_the_real_sweep(local_ray, tmp_path, capsys):
    from grokray.cli import main

    overrides = ["-s", "resources.pack_size=8", "-s", "seeds=[0, 1]", "-s", "train.steps=50", "-s", "phases.budget=50"]
    assert main(["run", str(QUICKSTART), "--scale", "smoke", "--dry-run", *overrides]) == 0
    out = capsys.readouterr().out
    numbers = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    configs, packs = int(numbers["configurations"]), int(numbers["packs"].split()[0])  # "2  (2 at once)"
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    code = main(["run", str(QUICKSTART), "--scale", "smoke", *overrides, "--tracking-uri", uri,
                 "--storage", str(tmp_path / "results"), "--checkpoint-every", "25"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{configs} configurations in {packs} packs" in out and "ui --tracking-uri" in out
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("quickstart")
    runs = client.search_runs([exp.experiment_id], filter_string="tags.`grokray.role` = 'configuration'",
                              max_results=1000)
    spec = load_spec(QUICKSTART, [o for o in overrides if o != "-s"], scale="smoke")
    assert (configs, packs) == (len(spec.points()), -(-len(spec.points()) // 8))
    assert len(runs) == configs and len({r.data.tags["grokray.pack_id"] for r in runs}) == packs


@pytest.fixture()
def mlflow_server(tmp_path):
    from grokray.tracking.local_servers import MlflowServer

    with MlflowServer(tmp_path) as server:
        yield server.url, tmp_path / "server.db", server


def _group_commands(pgid: int) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


@pytest.mark.launch  # a real launch on Ray: make launches (issue 69: make test stays the quick loop)
def test_sweep_logs_through_an_mlflow_server(local_ray, tmp_path, mlflow_server, monkeypatch, capfd):
    from grokray.run.grid import run_sweep

    url, db, server = mlflow_server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)  # the environment variable route, as on a cluster
    spec = load_spec(QUICKSTART, ["train.steps=60", "phases.budget=60"], scale="smoke")
    summary = run_sweep(spec, _options(tmp_path, None))
    # MLflow prints two "View run" lines (after a GET of the run) for every run it ends through a server: a
    # lab's launch would print 2*10^5; grokray ends its runs without them
    assert "View run" not in capfd.readouterr().out
    assert summary.tracking_uri == url
    check_tracking(summary, spec)
    # the server's own database holds the runs: the sweep really went through it
    direct = MlflowClient(f"sqlite:///{db}")
    exp = direct.get_experiment_by_name("quickstart")
    assert len(direct.search_runs([exp.experiment_id], max_results=1000)) == 1 + len(spec.points())
    # the server is MLflow's tracking server alone: no GenAI job runner and its queue consumers beside it
    commands = _group_commands(server.proc.pid)
    assert any("gunicorn" in c for c in commands) and not any("huey" in c or "job_runner" in c for c in commands)


def test_progress_is_a_live_line_on_a_terminal_and_plain_lines_in_a_log(capsys, monkeypatch):
    from grokray.run.progress import ProgressLine

    class T:
        def __init__(self, i):
            self.trial_id = str(i)

    first = {"members_done": 3, "members": 5, "step": 100, "phases": {"grokking": 1, "confusion": 2}}
    line = ProgressLine(total_configs=10, total_work=10 * 100, mode="auto", every_s=3600)
    line.setup()  # stdout is captured, not a terminal: plain lines, at most one per interval
    assert line.plain and not line.live
    line.on_trial_result(0, [], T(0), first)
    line.on_trial_result(0, [], T(1), {"members_done": 0, "members": 5, "step": 50, "phases": {}})
    line.on_trial_complete(0, [], T(1))
    line.on_experiment_end([])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "\r" not in "".join(out)  # the first result, then where it ended
    assert out[0].split(" ", 1)[1].startswith("[grokray] 3/10 configurations | confusion 2 grokking 1 |")
    assert "ETA" in out[1]
    # every configuration done, though most stopped early (a tenth of their budget's work): done, not an ETA
    line.on_trial_result(0, [], T(1), {"members_done": 5, "members": 5, "step": 10, "phases": {"comprehension": 5}})
    line.on_trial_result(0, [], T(0), {**first, "members_done": 5})
    assert line.line().endswith(" done") and "10/10 configurations" in line.line()
    line.on_trial_result(0, [], T(0), {**first, "members_done": 4})  # 9 of 10 done after 90 s: 10 s or less to go
    line.start -= 90
    assert line.line().split(" | ")[-1] in {"1m30s ETA 10s", "1m31s ETA 10s"}
    ended = ProgressLine(total_configs=5, total_work=500, mode="always", every_s=0)  # issue 39: "done" twice
    ended.setup()
    ended.on_trial_result(0, [], T(0), {"members_done": 5, "members": 5, "step": 100, "phases": {"grokking": 5}})
    ended.on_trial_complete(0, [], T(0))
    ended.on_experiment_end([])
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and printed[0].endswith(" done"), printed
    never = ProgressLine(10, 1000, mode="never")
    never.setup()
    never.on_trial_result(0, [], T(0), first)
    never.on_experiment_end([])
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    live = ProgressLine(10, 1000, mode="auto")
    live.setup()
    assert live.live and not live.plain
    live.on_trial_result(0, [], T(0), first)
    live.on_experiment_end([])
    assert capsys.readouterr().out.startswith("\r[grokray] 3/10 configurations")


def test_a_resumed_launchs_first_line_counts_what_its_first_launch_finished(capsys):
    """Issue 52: after --resume the line said 0/60 with 13 done until a pack reported."""
    from grokray.run.progress import ProgressLine

    class T:
        def __init__(self, i, last_result):
            self.trial_id, self.last_result = str(i), last_result

    restored = [T(0, {"members_done": 8, "members": 8, "step": 300, "total": 300, "phases": {"grokking": 8}}),
                T(1, {"members_done": 5, "members": 8, "step": 120, "total": 300, "phases": {"confusion": 5}}),
                T(2, {})]  # not started yet
    line = ProgressLine(total_configs=60, total_work=60 * 300, mode="always", every_s=0)
    line.setup()
    line.on_step_end(0, restored)  # Tune's first step of the restored experiment, before any new result
    first = capsys.readouterr().out.splitlines()[0]
    assert "[grokray] 13/60 configurations | confusion 5 grokking 8 |" in first, first
    assert first.endswith("ETA ?"), first  # issue 61: "ETA 0s", then rising: no time of this launch went there
    line.start -= 60  # a minute on, this launch's packs trained a tenth of the work, and 66 % is left: 6.6 minutes
    line.on_trial_result(1, restored, restored[2], {"members_done": 0, "members": 8, "step": 225, "total": 300})
    assert "ETA 6m37s" in line.line() or "ETA 6m38s" in line.line(), line.line()
    line.on_trial_result(1, restored, restored[2], {"members_done": 1, "members": 8, "step": 10, "total": 300,
                                                    "phases": {"memorization": 1}})
    assert "14/60 configurations" in line.line()  # a new result adds to them; the restored ones are not lost
    labelled = ProgressLine(24, 24 * 300, mode="never", label="round 2 (40 configurations done in earlier rounds)")
    assert labelled.line().startswith("[grokray] round 2 (40 configurations done in earlier rounds): 0/24 ")


def test_progress_keeps_talking_between_reports_and_counts_a_stopped_member_as_its_budget(capsys):
    """Issue 39: a log got no line for 25 minutes while packs trained; the ETA swung with early stoppers."""
    from grokray.run.progress import ProgressLine

    class T:
        trial_id = "0"

    line = ProgressLine(total_configs=4, total_work=4 * 1000, mode="always", every_s=30)
    line.setup()
    # one pack of 4: one member classified at step 200 (its budget is 1000), three still at step 500
    line.on_trial_result(0, [], T(), {"members_done": 1, "members": 4, "step": 500, "total": 1000, "phases": {}})
    line.start -= 100  # reported 100 s in: (1000 + 3 x 500) / 4000 = 62.5 % done, so 60 s to go
    line.measured = (line.measured[0], line.start + 100)
    assert line.line().split(" | ")[-1] in {"1m40s ETA 1m00s", "1m40s ETA 59s"}, line.line()
    line.on_step_end(0, [])  # within the interval: nothing new to say
    line.last_plain -= 30  # the interval passed without a report
    line.start -= 20  # 20 s later, no new report: the ETA counts down instead of growing with the clock
    line.measured = (line.measured[0], line.measured[1] - 20)
    line.on_step_end(0, [])
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and printed[1].split(" | ")[-1] in {"2m00s ETA 40s", "2m00s ETA 39s"}, printed


@pytest.mark.launch  # a real launch on Ray: make launches (issue 69: make test stays the quick loop)
def test_a_sweep_in_a_log_says_how_far_it_is(tmp_path):
    """`grokray run` with stdout in a file (nohup, ray job submit): progress lines, not minutes of silence."""
    log = tmp_path / "run.log"
    with log.open("w") as out:
        code = subprocess.run([sys.executable, "-m", "grokray.cli", "run", str(QUICKSTART), "--scale", "smoke",
                               "--tracking-uri", f"sqlite:///{tmp_path}/m.db", "--storage", str(tmp_path / "r")],
                              stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, timeout=300).returncode
    text = log.read_text()
    assert code == 0, text
    n = len(load_spec(QUICKSTART, scale="smoke").points())
    progress = [line for line in text.splitlines() if "[grokray] " in line and "configurations |" in line]
    assert progress and progress[-1].split(" ", 1)[1].startswith(f"[grokray] {n}/{n} configurations"), text


@pytest.mark.reliability  # 36 s: make reliability (the default suite ran 16.7 min, 2026-11-29)
def test_sigterm_stops_a_sweep_as_ctrl_c_does(tmp_path):
    """`ray job stop` and batch schedulers send SIGTERM: the driver stops as on Ctrl-C (Tune saves its state, the
    parent ends KILLED, the command says how to resume) instead of dying with its runs left RUNNING."""
    import signal
    import time

    uri = f"sqlite:///{tmp_path}/m.db"
    proc = subprocess.Popen([sys.executable, "-m", "grokray.cli", "run", str(QUICKSTART), "--scale", "smoke",
                             "-s", "phases.stop_when_classified=false", "-s", "train.steps=20000",
                             "-s", "phases.budget=20000", "--tracking-uri", uri, "--storage", str(tmp_path / "r")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    client = MlflowClient(uri)
    deadline = time.time() + 240
    while True:  # wait until the members log (the Tune run is under way)
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read() if proc.poll() else "timeout"
        exp = client.get_experiment_by_name("quickstart") if list(tmp_path.glob("r/quickstart_*")) else None
        runs = client.search_runs([exp.experiment_id], "tags.`grokray.role` = 'configuration'") if exp else []
        if runs and all(r.data.metrics for r in runs):
            break
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out[-2000:]  # stopped before the end, not killed (-15)
    assert "continue it with: " in out and "--resume" in out and "Tuner.restore" not in out
    assert "grokray: stopping: " in out and "Stop signal received" not in out  # one voice, from the stop on
    parent = client.search_runs([exp.experiment_id], "tags.`grokray.role` = 'parent'")
    assert [p.info.status for p in parent] == ["KILLED"]


def test_a_slow_pack_cuts_its_chunks_to_report_every_interval():
    """A chunk of `checkpoint_every` steps that would outlast the report interval is cut, so the progress line
    and the curves in MLflow keep their interval on a big model or a busy machine (issue 39)."""
    from grokray.worker.trainable import FIRST_CHUNK, next_chunk

    assert next_chunk(0, 0.0, 1000, 30.0) == FIRST_CHUNK  # first a short probe
    assert next_chunk(FIRST_CHUNK, 6.0, 1000, 30.0) == 100  # 0.3 s a step: 100 steps fill the 30 s
    assert next_chunk(100, 0.5, 1000, 30.0) == 1000  # fast again: back to checkpoint_every
    assert next_chunk(1, 90.0, 1000, 30.0) == 1  # never below one step
    # a search reports every chunk: a fast trial's chunks stay checkpoint_every, a slow one's last about 30 s
    assert next_chunk(FIRST_CHUNK, 0.01, 300, 0.0) == next_chunk(300, 1.0, 300, 0.0) == 300
    assert next_chunk(300, 300.0, 300, 0.0) == 30


def test_a_short_pack_reports_more_often_so_the_progress_count_moves():
    """Issue 52: the demo's count held 17/80 for a minute of 2.7, the 30 s interval of packs that train 2.7
    minutes. With the default interval a pack reports again after a tenth of its time so far, 5 to 30 s."""
    from grokray.worker.trainable import fitted_report_s

    assert fitted_report_s(30.0, 0.5) == 5.0  # never closer than 5 s
    assert fitted_report_s(30.0, 120.0) == 12.0  # two minutes into a demo's pack
    assert fitted_report_s(30.0, 3600.0) == 30.0  # a long pack keeps the cap
