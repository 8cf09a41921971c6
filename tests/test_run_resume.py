"""An interrupted `grokray run` continued with --resume: finished packs are not re-run, one run per config."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from grokray.spec.build import load_spec

ROOT = Path(__file__).resolve().parents[1]


def _children(uri):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("quickstart")
    if exp is None:
        return []
    return client.search_runs([exp.experiment_id], filter_string="tags.`grokray.role` = 'configuration'",
                              max_results=1000)


@pytest.mark.slow(reason="a 4,000-step launch stopped and resumed; the Ctrl-C resume of never_waits is CI's")
def test_interrupted_sweep_resumes_without_rerunning_finished_packs(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    grokray = Path(sys.executable).with_name("grokray")
    n = len(load_spec(ROOT / "sweeps" / "quickstart.yaml", scale="smoke").points())
    half = n // 2
    args = [str(grokray), "run", str(ROOT / "sweeps" / "quickstart.yaml"), "--scale", "smoke",
            "-s", f"resources.pack_size={half}", "-s", "train.steps=4000", "-s", "phases.budget=4000",
            "-s", "phases.stop_when_classified=false", "--max-concurrent", "1", "--checkpoint-every", "200",
            "--tracking-uri", uri, "--storage", str(tmp_path / "results")]
    first_args = [*args, "--progress", "never"]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    first = subprocess.Popen(first_args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    deadline = time.time() + 150
    while True:  # interrupt once pack 1 is finished and pack 2 has started logging
        assert first.poll() is None, first.stdout.read()
        assert time.time() < deadline, "sweep did not progress"
        # the Tune experiment directory appears after the driver created the MLflow tables and parent run;
        # opening the database earlier would race MLflow's schema creation
        runs = _children(uri) if list((tmp_path / "results").glob("quickstart_*")) else []
        finished = [r for r in runs if "grokray.phase" in r.data.tags]
        if len(finished) == half and len(runs) == n and any(r.data.metrics for r in runs if r not in finished):
            break
        time.sleep(0.5)
    first.send_signal(signal.SIGINT)
    out, _ = first.communicate(timeout=120)
    before = {r.data.tags["grokray.trial_key"]: r for r in _children(uri)}
    done_before = {k: r.info.end_time for k, r in before.items() if "grokray.phase" in r.data.tags}
    assert len(done_before) == half, out

    assert "[grokray] " not in out
    resumed = subprocess.run([*args, "--resume", "--progress", "always"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # the resumed launch's own --progress, not the first one's (restored with its Tune experiment), and a count
    # that includes the pack the first launch finished
    progress = [x for x in resumed.stdout.splitlines() if "[grokray] " in x]
    assert progress and f"{n}/{n} configurations" in progress[-1], resumed.stdout[-2000:]
    after = _children(uri)
    keys = [r.data.tags["grokray.trial_key"] for r in after]
    assert len(keys) == len(set(keys)) == n  # exactly one run per configuration
    by_key = {r.data.tags["grokray.trial_key"]: r for r in after}
    for key, end in done_before.items():
        assert by_key[key].info.end_time == end  # finished pack not re-run
    client = MlflowClient(uri)
    for run in after:
        assert "grokray.phase" in run.data.tags and run.info.status == "FINISHED"
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
        assert steps == sorted(set(steps)) and steps[-1] == 4000  # no duplicate, none missing at the end
    parents = client.search_runs([after[0].info.experiment_id], filter_string="tags.`grokray.role` = 'parent'")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"


def test_the_private_tune_handle_grokray_adapts_is_there(tmp_path):
    """grokray.run.launch.replace_restored_callbacks is the one use of Tune's private local tuner (a restored
    Tuner takes no run_config): a Ray that changes it fails here, by name, not inside `--resume`."""
    from ray import tune

    from grokray.run.launch import replace_restored_callbacks
    from grokray.run.progress import ProgressLine

    tuner = tune.Tuner(lambda config: None, run_config=tune.RunConfig(storage_path=str(tmp_path), callbacks=[]))
    line = ProgressLine(1, 1.0, "never")
    assert hasattr(tuner, "_local_tuner"), "ray.tune.Tuner lost _local_tuner: see replace_restored_callbacks"
    assert replace_restored_callbacks(tuner, [line]) and tuner._local_tuner.get_run_config().callbacks == [line]


@pytest.mark.reliability  # 41 s: make reliability (the default suite ran 16.7 min, 2026-11-29)
def test_resume_of_a_finished_launch_says_so_and_changes_nothing(tmp_path):
    """Issue 52: `--resume` after a launch closed as finished re-closed it, rewriting its duration, description
    and figures. Now it says the launch is finished, exits 0 and leaves the parent as it was, to the byte."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    grokray = Path(sys.executable).with_name("grokray")
    args = [str(grokray), "run", str(ROOT / "sweeps" / "quickstart.yaml"), "--scale", "smoke", "-s",
            "train.steps=100", "-s", "phases.budget=100", "--tracking-uri", uri, "--storage", str(tmp_path / "r"),
            "--progress", "never"]
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    first = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("quickstart")
    [parent] = client.search_runs([exp.experiment_id], "tags.`grokray.role` = 'parent'")

    def record(run_id):
        run = client.get_run(run_id)
        artifacts = sorted(a.path for folder in ("", "analysis") for a in client.list_artifacts(run_id, folder))
        return (run.info.status, run.info.end_time, run.data.tags, run.data.metrics, artifacts,
                (Path(client.download_artifacts(run_id, "analysis/phase_diagram.png", str(tmp_path)))).read_bytes())

    before = record(parent.info.run_id)
    # the machine said to be busy (issue 61: the note was printed for a --resume that then changed nothing)
    busy = ("import sys; import grokray.run.launch as launch; launch.busy_machine_note = lambda: 'BUSY-NOTE'; "
            "from grokray.cli import main; sys.exit(main(sys.argv[1:]))")
    again = subprocess.run([sys.executable, "-c", busy, *args[1:], "--resume"], cwd=tmp_path,
                           env={**env, "GROKRAY_SUPERVISE": "0"}, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "BUSY-NOTE" not in again.stderr
    assert "finished" in again.stdout and parent.info.run_id in again.stdout and "changed nothing" in again.stdout
    assert record(parent.info.run_id) == before
    assert len(client.search_runs([exp.experiment_id], "tags.`grokray.role` = 'parent'")) == 1
