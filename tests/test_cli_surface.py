"""The CLI says what it does: version, examples, readable verdicts, a clear refusal where a command is the wrong
one, a dry-run for every launching command, and reading commands that never create a store."""

import os
from pathlib import Path

import pytest

from grokray.cli import main

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"
DEGROK = ROOT / "sweeps" / "degrok_toy.yaml"


def test_version_and_help_with_examples(capsys):
    with pytest.raises(SystemExit) as ok:
        main(["--version"])
    assert ok.value.code == 0 and capsys.readouterr().out.startswith("grokray 0.")
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and "grokray run sweeps/quickstart.yaml --dry-run" in out
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "where to train the configuration" in capsys.readouterr().out  # --device says what it is


def test_train_says_what_it_trains_on_how_many_threads_and_never_instead_of_none(capsys):
    import torch

    torch.set_num_threads(2)
    assert main(["train", str(QUICKSTART), "--scale", "smoke", "-s", "optim.decoder.lr=1e-2",
                 "-s", "optim.decoder.weight_decay=0"]) == 0
    captured = capsys.readouterr()
    last = captured.out.strip().splitlines()[-1]
    assert last.startswith("phase: memorization") and "None" not in last and "val acc never >= 0.9" in last
    said = [line for line in captured.err.splitlines() if line.startswith("training quickstart:")]
    assert said == ["training quickstart: addition x toy, optim.decoder.lr=0.01, optim.decoder.weight_decay=0, "
                    "seed=1; up to 300 steps on cpu, 1 thread"], captured.err
    assert torch.get_num_threads() == 1  # resources.cpu: 1, as a sweep's trial gets


def test_reading_commands_create_no_store(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["analyze", "--experiment", "nosuch", "-o", "out"]) == 2
    assert main(["atlas", "--scale", "smoke", str(QUICKSTART), "--pages-only", "-o", "pages"]) == 2
    assert "no MLflow store at" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []  # no mlflow.db, no mlruns, no output directory


def test_run_on_a_search_spec_points_to_search(capsys):
    assert main(["run", str(DEGROK), "--scale", "smoke", "--dry-run"]) == 2
    assert f"run `grokray search {DEGROK} --scale smoke`" in capsys.readouterr().err


def test_search_dry_run_pins_and_estimates_without_starting_anything(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/m.db"
    assert main(["search", str(DEGROK), "--scale", "smoke", "--dry-run", "--no-calibrate", "--n-trials", "5",
                 "-s", "optim.decoder.lr=3e-4", "--tracking-uri", uri]) == 0
    captured = capsys.readouterr()
    assert "pins the searched key optim.decoder.lr" in captured.err
    assert "optim.decoder.lr: one of 0.0003" in captured.out and "trials:         5, " in captured.out
    assert "estimate:" in captured.out and "fixed costs:" in captured.out
    assert not (tmp_path / "m.db").exists() and not (tmp_path / "grokray-results").exists()


def test_dry_run_says_why_packs_hold_one_member(capsys, tmp_path):
    assert main(["run", str(ROOT / "sweeps" / "power_transformer_ops.yaml"), "--dry-run", "--no-calibrate",
                 "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]) == 0
    assert not (tmp_path / "m.db").exists()  # a dry-run reads a store, and makes none
    out = capsys.readouterr().out
    packs = next(line for line in out.splitlines() if line.startswith("packs:"))
    assert "one member per pack" in packs and "MB per member" in packs and "resources.pack_size" in packs
    fixed = next(line for line in out.splitlines() if line.startswith("fixed costs:"))
    assert "per sweep" in fixed and "first pack" in fixed and "process is reused" in fixed


def test_every_mistake_options_and_spec_is_reported_at_once(tmp_path, monkeypatch, capsys):
    from grokray.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["run", str(ROOT / "sweeps" / "quickstart.yaml"), "--max-concurrent", "0", "--report-every", "-1",
                 "--checkpoint-every", "0", "-s", "model.nope=3"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and err[-1] == "grokray: 4 mistakes; nothing was run", err
    for flag in ("model.nope", "--max-concurrent", "--report-every", "--checkpoint-every"):
        assert any(line.startswith(f"grokray: error: {flag}:") for line in err), (flag, err)
    assert not list(tmp_path.iterdir())


@pytest.mark.library  # a whole search through the CLI (~50 s): CI's `make library`, beside the other launches
def test_a_launch_prints_no_library_notice_and_files_them_beside_its_results(tmp_path):
    """Issue 39: Ray's token notice, MLflow's table creation, Optuna's ExperimentalWarning and Tune's
    max_concurrent_trials note read like misconfiguration. A search (all four libraries) through the CLI as a user
    runs it (behind the supervisor) prints none of them; Ray's are in the results folder's log."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("GROKRAY_SUPERVISE", "RAY_ADDRESS", "MLFLOW_TRACKING_URI",
                                                             "MLFLOW_LOGGING_LEVEL")}
    done = subprocess.run([sys.executable, "-m", "grokray", "search", str(ROOT / "sweeps" / "degrok_toy.yaml"),
                           "--scale", "smoke", "--progress", "never", "-s", "search.n_trials=2"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for notice in ("Token authentication", "Creating initial MLflow database tables", "ExperimentalWarning",
                   "max_concurrent_trials", "Started a local Ray instance"):
        assert notice not in done.stderr + done.stdout, notice
    # Ray's notices of ray.init are filed (its token notice only where no token was made yet)
    assert "Started a local Ray instance" in (tmp_path / "grokray-results" / "library-notices.log").read_text()


def test_printed_commands_run_as_printed_when_the_venv_is_not_activated(tmp_path, monkeypatch):
    """Issue 39: `look at it: grokray ui` failed where .venv/bin is not on PATH. The printed command is the path
    that runs this installation then, and plain `grokray` where that name already does."""
    import shutil
    import subprocess
    import sys

    from grokray.terminal import grokray_command, ui_command

    mine = Path(sys.executable).with_name("grokray")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # not activated
    exe = grokray_command()
    assert exe == str(mine) and ui_command(f"sqlite:///{tmp_path}/mlflow.db") == f"{exe} ui"
    assert subprocess.run([*ui_command("sqlite:///x.db").split()[:1], "--version"], capture_output=True,
                          text=True).stdout.startswith("grokray ")
    monkeypatch.setenv("PATH", f"{mine.parent}:/usr/bin:/bin")  # activated
    assert shutil.which("grokray") and grokray_command() == "grokray"


def test_a_private_ray_runs_trials_at_the_users_priority_and_a_busy_machine_is_said(tmp_path, monkeypatch):
    """Issue 39: Ray's workers ran at nice 15, so `make demo` stalled for 25 minutes beside another job, unsaid.
    A private Ray's workers run at the user's own priority (a niceness set in the environment is kept), and a
    machine other jobs already load is said before the launch."""
    import ray

    from grokray.run.cluster import WORKER_NICENESS, busy_machine_note, start_ray
    from grokray.run.options import LaunchOptions

    assert busy_machine_note(cores=2, load=0.4) is None
    assert busy_machine_note(cores=2, load=2.3) == (
        "grokray: this machine is busy (load average 2.3 on 2 cores) before the launch starts: its trials share "
        "the cores with those jobs, so expect it slower than the dry-run's estimate")
    assert busy_machine_note(cores=16, load=4.0) is None
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(WORKER_NICENESS, raising=False)
    assert start_ray(LaunchOptions(tracking_uri=f"sqlite:///{tmp_path}/m.db", storage=str(tmp_path), num_cpus=1))
    try:
        assert ray.get(ray.remote(lambda: os.nice(0)).remote()) == 0
    finally:
        ray.shutdown()
    assert WORKER_NICENESS not in os.environ  # set only for Ray's start


def test_output_into_a_closed_pipe_ends_quietly_as_a_shell_tool_does(tmp_path):
    """`grokray analyze ... | head -4` printed a BrokenPipeError traceback once `head` had its lines (issue 52's
    transcript). The reader's end is closed before grokray writes, so every write meets the broken pipe."""
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-m", "grokray.cli", "train", str(QUICKSTART), "--scale", "smoke",
                               "-s", "seeds=[1]"], stdout=write, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              timeout=300)
    finally:
        os.close(write)
    assert done.returncode == 141 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "BrokenPipe" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("module", ["grokray", "grokray.cli"])
def test_a_stop_caught_inside_exec_made_code_ends_with_grokrays_exit_code(tmp_path, module):
    """CI saw `grokray ui` end by SIGINT (-2) instead of 130: its SIGTERM had raised KeyboardInterrupt inside code
    made by exec() (a dataclass being built as a module was imported), which CPython then marks unhandled, though
    the CLI caught it, and `python -m` ends such a process by SIGINT. The same stop each time here: the command's
    handler raises the interrupt from exec'd code. Run as the supervisor runs a launch's driver (`python -m
    grokray`) and as the tests run the CLI; about 0.1 s each."""
    import subprocess
    import sys

    (tmp_path / "stopped_in_exec.py").write_text(
        "import runpy, sys\n"
        "from grokray import ui\n"
        "ui.serve_runs_ui = lambda *args: exec('raise KeyboardInterrupt')\n"
        f"sys.argv = [{module!r}, 'ui']\n"
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")
    done = subprocess.run([sys.executable, "-m", "stopped_in_exec"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"})
    assert (done.returncode, done.stderr.strip().splitlines()[-1:]) == (130, ["grokray: interrupted"]), done.stderr
