"""Your own model and task through the launch (issue 60): `grokray run` on a private Ray with a real MLflow store,
a user package that lives outside grokray (tests/fixtures/userpkg), then `grokray analyze` (`make library`); in the
slow tier, a
Ctrl-C'd run resumed without training a finished configuration again, and `grokray search` on the same code.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from test_reliability import children

ROOT = Path(__file__).resolve().parents[1]
USERPKG = ROOT / "tests" / "fixtures" / "userpkg"
GROKRAY = Path(sys.executable).with_name("grokray")
SPEC = {
    "name": "userdemo",
    "task": {"name": "dataset", "factory": "userpkg.data:sparse_parity", "kwargs": {"n": 200}, "inputs": "features",
             "labels": "parity", "train_fraction": 0.6},
    "model": {"name": "module", "factory": "userpkg.models:make_mlp", "kwargs": {"width": 16}},
    "optim": {"default": {"name": "adamw", "lr": 1.0e-2, "weight_decay": 1.0}},
    "train": {"steps": 300}, "phases": {"budget": 300, "gap": 50},
    "seeds": [0, 1],
    "sweep": {"model.kwargs.width": {"values": [8, 16]}, "task.train_fraction": {"values": [0.5, 0.8]}},
}


def _env():
    return {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "PYTHONPATH")}


@pytest.mark.library  # CI's `make library` (25 s): the default suite stays under 15 minutes
def test_a_sweep_of_the_users_own_module_and_data_on_ray_and_mlflow(tmp_path):
    """The driver imports userpkg from a directory that is neither the working directory nor on PYTHONPATH, so a
    Tune worker (which runs in its trial's folder) finds it only through the code paths its context carries."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    driver = (f"import sys; sys.path.append({str(USERPKG)!r}); from grokray.cli import main; "
              f"sys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", driver, "run", str(spec), "--tracking-uri", uri, "--storage",
                           str(tmp_path / "results"), "--progress", "never"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "8 configurations in 4 packs" in done.stdout
    runs = children(uri, "userdemo")
    assert len(runs) == 8
    client = MlflowClient(uri)
    widths = set()
    for run in runs:
        assert run.data.tags["grokray.phase"] in ("comprehension", "grokking", "memorization", "confusion")
        assert run.info.status == "FINISHED"
        history = client.get_metric_history(run.info.run_id, "val/acc")
        assert len(history) >= 5 and 0.0 <= history[-1].value <= 1.0
        widths.add(run.data.params["model.kwargs.width"])
    assert widths == {"8", "16"}

    analyzed = subprocess.run([str(GROKRAY), "analyze", "--experiment", "userdemo", "--tracking-uri", uri, "-o",
                               str(tmp_path / "figures")], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                              timeout=300)
    assert analyzed.returncode == 0, analyzed.stdout[-2000:] + analyzed.stderr[-2000:]
    assert (tmp_path / "figures" / "phase_diagram.png").stat().st_size > 10_000
    assert "model.kwargs.width" in analyzed.stdout and "task.train_fraction" in analyzed.stdout


@pytest.mark.slow(reason="a 30,000-step launch stopped, resumed, then a search; the module launch runs in make library")
def test_a_ctrl_c_then_resume_trains_no_finished_configuration_again_and_search_works(tmp_path):
    """From the user's project directory, as they would type it: a sweep stopped by Ctrl-C after its first pack
    finished, then `--resume`; then `grokray search` over the module's learning rate."""
    raw = {**SPEC, "train": {"steps": 30000}, "phases": {"budget": 30000, "gap": 50, "stop_when_classified": False},
           "resources": {"pack_size": 4}}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(raw))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = [str(GROKRAY), "run", str(spec), "--tracking-uri", uri, "--storage", str(tmp_path / "results"),
            "--max-concurrent", "1", "--checkpoint-every", "200"]
    first = subprocess.Popen([*args, "--progress", "never"], cwd=USERPKG, env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while True:  # stop once one pack finished and the next one logs
        assert first.poll() is None, first.stdout.read()
        assert time.time() < deadline, "the sweep did not progress"
        runs = children(uri, "userdemo") if list((tmp_path / "results").glob("userdemo_*")) else []
        finished = [r for r in runs if "grokray.phase" in r.data.tags]
        if len(finished) >= 4 and any(r.data.metrics for r in runs if r not in finished):
            break
        time.sleep(0.5)
    first.send_signal(signal.SIGINT)
    out, _ = first.communicate(timeout=120)
    done_before = {r.data.tags["grokray.trial_key"]: r.info.end_time for r in children(uri, "userdemo")
                   if "grokray.phase" in r.data.tags}
    assert 4 <= len(done_before) < 8, out[-3000:]
    resumed = subprocess.run([*args, "--resume", "--progress", "never"], cwd=USERPKG, env=_env(),
                             capture_output=True, text=True, timeout=400)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    after = {r.data.tags["grokray.trial_key"]: r for r in children(uri, "userdemo")}
    assert len(after) == 8 and all("grokray.phase" in r.data.tags for r in after.values())
    for key, end in done_before.items():
        assert after[key].info.end_time == end  # not trained again

    search = {**SPEC, "name": "usersearch", "sweep": None, "seeds": [0],
              "search": {"space": {"optim.default.lr": {"float": [1.0e-3, 3.0e-2], "log": True}}, "n_trials": 3,
                         "max_concurrent": 1, "objective": "time_to_generalize"}}
    (tmp_path / "search.yaml").write_text(yaml.safe_dump({k: v for k, v in search.items() if v is not None}))
    searched = subprocess.run([str(GROKRAY), "search", str(tmp_path / "search.yaml"), "--tracking-uri", uri,
                               "--storage", str(tmp_path / "results"), "--progress", "never"], cwd=USERPKG,
                              env=_env(), capture_output=True, text=True, timeout=400)
    assert searched.returncode == 0, searched.stdout[-3000:] + searched.stderr[-3000:]
    trials = children(uri, "usersearch")
    assert len(trials) == 3 and all("grokray.phase" in r.data.tags for r in trials)
    lrs = {float(r.data.params["optim.all.lr"]) for r in trials}
    assert len(lrs) == 3 and all(1e-3 <= lr <= 3e-2 for lr in lrs)
