"""Issue 61: the README's `bash` blocks, run in order as a newcomer runs them, in a copy of the checkout's tracked
files (a fresh clone: no store, no results). Its search commands once failed in that order (the smoke search took
the full one's study). A command that trains for longer than a couple of minutes runs at its smoke preset where
later commands read what it ran (AT_SMOKE: the order and the reading are what this checks; the quickstart's own
phases are its atlas page's), else as its `--dry-run`, which makes every check the launch makes; the tables say
each one's measured time. A command that repeats an earlier one's launch (SAME_AS) is not run twice. Measured on
the 2-core VM: 6 min 57 s with the quickstart sweep run twice, 13 min with it once at full scale beside other work
(the demo 6.5 min of it), and since issue 69 at smoke: see docs/testing.md.
"""

import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# command as the README writes it -> why it runs as its --dry-run here (measured on the 2-core VM)
AS_DRY_RUN = {
    "grokray run sweeps/rfm_fraction.yaml --scale reduced": "8.8 min (docs/atlas/rfm_fraction-reduced.md)",
    "grokray search sweeps/degrok_toy.yaml": "40 trials x 4 seeds, about 15 min",
    "grokray atlas --scale smoke": "every spec, about 10 min; make library runs the same atlas "
                                   "(tests/test_library_specs.py)",
}
# command -> why it is not run here at all
NOT_RUN = {
    "make test": "the default suite: CI's first step, before the tier this test runs in",
    "python benchmarks/bench_module.py --factory mylab.models:make_net --kwargs '{\"width\": 256}' --task "
    "'{\"name\": \"modular\", \"op\": \"mul\", \"p\": 97, \"train_fraction\": 0.3}'":
        "names the reader's own factory; tests/test_bench_module.py runs it on a fixture's",
    "grokray atlas --scale paper sweeps/liu_fig6b_toy_regression.yaml": "186 min (its page); the README's line "
                                                                        "before it is its --dry-run",
    "grokray search sweeps/degrok_toy.yaml --resume --n-trials 60": "grows the study of the full search, run here "
                                                                     "as its dry-run",
}
# command -> what it trains in full, which here is its smoke preset (make: DEMO_SCALE=smoke; else --scale smoke)
AT_SMOKE = {
    "make demo": "80 configurations x up to 10,000 steps: 2.3 min alone on the 2-core VM, 6.5 min beside other work",
    "grokray run sweeps/quickstart.yaml --resume": "a resume of the demo's launch, which ran at smoke",
    "grokray train sweeps/quickstart.yaml -s seeds=[1]": "10,000 steps (7 s); smoke: 300",
    "grokray train sweeps/quickstart.yaml -s optim.decoder.lr=3e-4 -s seeds=[2]": "10,000 steps (23 s); smoke: 300",
    "grokray run sweeps/own_model.yaml": "36 configurations, about 5 min; the README's analyze after it reads it",
}
# command -> the earlier command that ran the same launch (no command twice where once shows the same thing)
SAME_AS = {
    "grokray run sweeps/quickstart.yaml": "make demo",  # the Makefile's demo runs exactly this launch first
}
# command -> (its exit code here, words its output must hold): `--pages-only` in a fresh clone has no reduced runs
# of the figures whose reduced pages are not committed, and says so (exit 1); it keeps every committed page
EXPECTED = {"grokray atlas --scale reduced --pages-only": (1, "pieces not run or not complete")}
# what the README's commands may rewrite in docs/atlas: the quickstart sweep is the quickstart's reduced piece, so
# its page is redrawn from the runs made here; the index lists it
REWRITTEN = re.compile(r"docs/atlas/(README\.md|(data/|img/)?quickstart-reduced[.-].*)$")
ENV_DROPPED = ("MLFLOW_TRACKING_URI", "RAY_ADDRESS", "GROKRAY_PROGRESS")


def readme_commands(text: str) -> list[str]:
    """Each command line of each ```bash block, in order, continuation lines joined, comments kept (bash drops
    them)."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line.strip())
    return commands


def bare(command: str) -> str:
    """The command without its comment, `.venv/bin/` or spacing: the key of the tables above."""
    words = command.split("#")[0].split()
    return " ".join(w.removeprefix(".venv/bin/") for w in words)


def test_the_readme_lists_its_commands_in_bash_blocks_the_tables_name():
    """The tables above name commands the README has (a renamed command must not silently run in full)."""
    found = {bare(c) for c in readme_commands((ROOT / "README.md").read_text())}
    named = set(AS_DRY_RUN) | set(NOT_RUN) | set(SAME_AS) | set(AT_SMOKE)
    assert named <= found, named - found
    demo = (ROOT / "Makefile").read_text().split("\ndemo:")[1].split("\n\n")[0]
    assert "$(BIN)/grokray run sweeps/quickstart.yaml$(if $(DEMO_SCALE), --scale $(DEMO_SCALE))\n" in demo, \
        "SAME_AS: make demo no longer runs that launch (AT_SMOKE: at DEMO_SCALE)"
    assert "make demo" in found and "grokray search sweeps/degrok_toy.yaml --scale smoke" in found


def _fresh_copy(dest: Path) -> None:
    """The checkout's tracked files (as a clone has them), and its installed .venv shared (CI made it moments
    before; installing again would take minutes and test pip, not the README). PYTHONPATH then points the shared
    .venv at the copy's code (its editable install points at this checkout, which may change while this runs)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    (dest / ".venv").symlink_to(ROOT / ".venv")


def _parents(where: Path, experiment: str) -> list[str]:
    """Parent run ids of an experiment's launches, oldest first."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{where}/mlflow.db")
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], "tags.grokray.kind = 'grid'", order_by=["start_time ASC"])
    return [r.info.run_id for r in runs]


def _serve_then_stop(command: str, where: Path, env: dict) -> str:
    """`grokray ui` serves until stopped: it must answer on 127.0.0.1:5000, then it is stopped, and the server
    with it (a server left there by anything else would answer for it: the port must be free before and after)."""
    assert not _answers(5000), "127.0.0.1:5000 is taken before `grokray ui` starts"
    proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=where, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                with urllib.request.urlopen("http://127.0.0.1:5000/health", timeout=2) as reply:
                    return reply.read().decode()
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                time.sleep(1)
        raise AssertionError(f"{command}: nothing answered on 127.0.0.1:5000 within 90 s")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        assert not _answers(5000), "`grokray ui` was stopped and its server still answers on 127.0.0.1:5000"


def _answers(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _changed_atlas(where: Path) -> list[str]:
    """The committed files of docs/atlas that differ in the copy."""
    files = subprocess.run(["git", "ls-files", "docs/atlas"], cwd=ROOT, capture_output=True, text=True).stdout
    return [f for f in files.split() if not (where / f).exists()
            or (where / f).read_bytes() != (ROOT / f).read_bytes()]


@pytest.mark.library
def test_every_readme_command_block_runs_in_order_from_a_fresh_clone(tmp_path):
    where = tmp_path / "clone"
    where.mkdir()
    _fresh_copy(where)
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROPPED}
    env["PYTHONPATH"] = str(where)  # the copy's own code, before the shared .venv's editable install of this one
    which = subprocess.run([".venv/bin/python", "-c", "import grokray, analysis; print(grokray.__file__, "
                            "analysis.__file__)"], cwd=where, env=env, capture_output=True, text=True, check=True)
    assert all(path.startswith(str(where)) for path in which.stdout.split()), which.stdout
    ran, log = [], []
    for command in readme_commands((where / "README.md").read_text()):
        key = bare(command)
        if key in NOT_RUN:
            log.append(f"not run: {key} ({NOT_RUN[key]})")
            continue
        if key in SAME_AS:
            assert SAME_AS[key] in ran, f"{key}: {SAME_AS[key]} was to run it first"
            log.append(f"ran by {SAME_AS[key]}: {key}")
            ran.append(key)
            continue
        if key == "grokray ui":
            start = time.time()
            assert _serve_then_stop(command.split("#")[0], where, env).strip() == "OK"
            log.append(f"{time.time() - start:6.1f} s  {command.split('#')[0].strip()} (answered, then stopped)")
            ran.append(key)
            continue
        line = command.split("#")[0].strip()
        if key in AS_DRY_RUN:
            line += " --dry-run"
        if key in AT_SMOKE:
            line += " DEMO_SCALE=smoke" if key.startswith("make ") else " --scale smoke"
        if key.startswith("make "):  # the shared .venv is installed: make must not install into it again
            line = line.replace("make ", "make -o .venv/.installed ", 1)
        if "RUN_ID" in line:  # a placeholder: the README says which run it stands for
            launches = _parents(where, "quickstart")
            line = line.replace("PARENT_RUN_ID", launches[0]).replace("RUN_ID", launches[-1])
        start = time.time()
        out = subprocess.run(["bash", "-c", line], cwd=where, env=env, capture_output=True, text=True,
                             timeout=900)
        log.append(f"{time.time() - start:6.1f} s  {line}")
        code, words = EXPECTED.get(key, (0, ""))
        assert out.returncode == code and words in out.stdout + out.stderr, \
            f"{line}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}\n" + "\n".join(log)
        assert not [f for f in _changed_atlas(where) if not REWRITTEN.search(f)], (line, _changed_atlas(where))
        ran.append(key)
    print("\n".join(log))
    # what ran left what the README says: the demo's figures, two quickstart launches, the smoke search's study
    assert (where / "grokray-results" / "quickstart-figures" / "phase_diagram.png").stat().st_size > 1000
    assert len(_parents(where, "quickstart")) == 2  # the demo's (also "Run a sweep"'s), the smoke one; --resume none
    assert (where / "figs" / "comparison.png").exists()
    assert (where / "figs-own" / "phase_diagram.png").stat().st_size > 1000  # the own module's smoke launch
    import pandas as pd

    reps = pd.read_csv(where / "figs" / "representations.csv")  # the smoke launch kept its 8 final states
    assert len(reps) == 8 and reps["rqi"].notna().all()
    assert "grokray search sweeps/degrok_toy.yaml --scale smoke" in ran
    assert len(ran) + len(NOT_RUN) == len(readme_commands((where / "README.md").read_text()))


def test_what_the_readme_quotes_from_a_page_is_on_that_page():
    """Issue 63: the README restated the methods page by hand ("one fresh seed did not generalize" where two did).
    It now quotes the page: every `> ` line after a paragraph ending "quoted:" is a line of the page it links."""
    text = (ROOT / "README.md").read_text()
    quotes = re.findall(r"\[(docs/atlas/[\w.-]+\.md)\]\([^)]*\)[^\n]*\n?[^\n]*quoted:\n\n((?:> .*\n)+)", text)
    assert quotes, "the README quotes no page"
    for page, block in quotes:
        lines = set((ROOT / page).read_text().splitlines())
        missing = [q[2:] for q in block.splitlines() if q[2:] not in lines]
        assert not missing, (page, missing)
