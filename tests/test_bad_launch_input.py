"""Issue 52: every bad launch input is one line naming the option and what is allowed, exit 2, before Ray starts or
any file or folder is made (the cwd and the storage stay empty). The first cases are the ones a new user met
(tracebacks, exit 1 or 3, `./grokray-results` and `./mlflow.db` made); the rest are more of the same kinds."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = str(ROOT / "sweeps" / "quickstart.yaml")
CASES = [  # (extra arguments, the option the line must name)
    (["--tracking-uri", "foo://bar"], "--tracking-uri"),
    (["--tracking-uri", "::garbage:://%%"], "--tracking-uri"),
    (["--tracking-uri", "sqlite:////nonexistent-dir/x.db"], "--tracking-uri"),
    (["--tracking-uri", "http://"], "--tracking-uri"),
    (["--storage", "/proc/grokray-x"], "--storage"),
    (["--storage", "/etc/hostname/x"], "--storage"),
    (["--scale", "bogus"], "--scale"),
    (["-s", "train.steps=ten"], "train.steps"),
    (["--tracking-uri", "ftp://example.org/x"], "--tracking-uri"),
    (["--tracking-uri", "sqlite:////etc/hostname/x.db"], "--tracking-uri"),
    (["--tracking-uri", "https://:5000"], "--tracking-uri"),
    (["--storage", "/sys/kernel/grokray"], "--storage"),
    (["--max-concurrent", "0"], "--max-concurrent"),
    (["--checkpoint-every", "0"], "--checkpoint-every"),
    (["--report-every", "-1"], "--report-every"),
    (["--delivery-wait", "-5"], "--delivery-wait"),
    (["--progress", "sometimes"], "--progress"),
    (["-s", "optim.decoder.filter_lambda=2"], "optim.decoder.filter_lambda"),
    (["--delivery-wait", "nan"], "--delivery-wait"),  # issue 61: NaN passed every comparison
    (["-s", "seeds=[1,1]"], "seeds"),  # issue 61: trained twice, counted twice
]


@pytest.mark.parametrize("command", ["run", "search"])
@pytest.mark.parametrize("extra, option", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_bad_input_is_one_line_exit_2_and_makes_nothing(tmp_path, command, extra, option):
    spec = SPEC if command == "run" else str(ROOT / "sweeps" / "degrok_toy.yaml")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    out = subprocess.run([sys.executable, "-m", "grokray", command, spec, *extra], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert lines[0].startswith("grokray: error:") and option in lines[0]
    assert list(tmp_path.iterdir()) == []


REPLAY_CASES = [  # issue 61: (arguments after `replay`, the flag or field the line names); each used to write or crash
    (["missing-dir"], "--tracking-uri"),  # created ./mlflow.db to look for the launch
    (["a-file.txt"], "dir"),  # likewise
    (["missing-dir", "--wait", "-1"], "--wait"),  # wrote, and never named the flag
    (["missing-dir", "--wait", "nan"], "--wait"),
    (["missing-dir", "--tracking-uri", "foo://bar"], "--tracking-uri"),  # a traceback
]


@pytest.mark.parametrize("args, option", REPLAY_CASES, ids=[" ".join(a) for a, _ in REPLAY_CASES])
def test_a_replay_refusal_is_one_line_and_writes_nothing(args, option, tmp_path, monkeypatch, capsys):
    from grokray.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "a-file.txt").write_text("not a spool")
    code = main(["replay", *args])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("grokray: error:") and option in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file.txt"]


DRY_RUN_CASES = [  # issue 61: a dry-run refuses what the launch refuses (each exited 0 before)
    (["--tracking-uri", "foo://bar"], "--tracking-uri"),
    (["--tracking-uri", "sqlite:////nonexistent-dir/x.db"], "--tracking-uri"),
    (["--storage", "/proc/grokray-x"], "--storage"),
    (["-s", "resources.gpu=0.25"], "resources.gpu"),
]


@pytest.mark.parametrize("command", ["run", "search"])
@pytest.mark.parametrize("extra, option", DRY_RUN_CASES, ids=[" ".join(c[0]) for c in DRY_RUN_CASES])
def test_a_dry_run_refuses_what_the_launch_refuses(command, extra, option, tmp_path, monkeypatch, capsys):
    import torch

    from grokray.cli import main

    if option == "resources.gpu" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA: a GPU share is a valid request here")
    monkeypatch.chdir(tmp_path)
    for name in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    spec = SPEC if command == "run" else str(ROOT / "sweeps" / "degrok_toy.yaml")
    code = main([command, spec, "--dry-run", "--no-calibrate", *extra])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("grokray: error:") and option in lines[0], lines
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["run", "search"])
def test_resume_with_nothing_to_resume_starts_nothing_and_writes_nothing(command, tmp_path, monkeypatch, capsys):
    """Issue 61: it started Ray and wrote ./grokray-results (run), or created an empty journal (search)."""
    from grokray.cli import main

    monkeypatch.chdir(tmp_path)
    for name in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    spec = SPEC if command == "run" else str(ROOT / "sweeps" / "degrok_toy.yaml")
    code = main([command, spec, "--resume"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "--resume" in lines[0], lines
    assert list(tmp_path.iterdir()) == []


OTHER_COMMANDS = [  # issue 61: each of these trained, hung, wrote or printed a traceback before
    (["atlas", "--scale", "smoke", SPEC, "-o", "/proc/grokray-x"], "-o"),  # trained the piece, then a traceback
    (["ui", "--tracking-uri", "foo://bar"], "--tracking-uri"),  # a traceback
    (["run", SPEC, "--address", "127.0.0.1:1"], "--address"),  # waited over 100 s, and made ./mlflow.db
    (["run", SPEC, "--address", "not-an-address"], "--address"),
    (["run", "deep.yaml"], "spec"),  # 1,000 levels of nesting: a RecursionError of 2,990 lines
]


@pytest.mark.parametrize("args, option", OTHER_COMMANDS, ids=[" ".join(a[:2]) + " " + o for a, o in OTHER_COMMANDS])
def test_other_commands_refuse_in_one_line_before_anything(args, option, tmp_path, monkeypatch, capsys):
    from grokray.cli import main

    monkeypatch.chdir(tmp_path)
    for name in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    if "deep.yaml" in args:
        (tmp_path / "deep.yaml").write_text("a: " + "[" * 1000 + "]" * 1000 + "\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    code = main(args)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"grokray: error: {option}:"), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == before
