"""Issue 61: bad inputs across every subcommand (the count is asserted below). Each exits 2 with one line naming
the field or flag, before Ray starts, and writes nothing anywhere: the working directory (where the default
MLflow store and storage go), the named storage and store folders, the home directory and the temp directory are
snapshotted before and after. The CLI runs in-process: a case that is wrongly accepted trips a wire (no process may
start, no trial may train) instead of launching a sweep."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
Q = str(ROOT / "sweeps" / "quickstart.yaml")  # a grid spec
D = str(ROOT / "sweeps" / "degrok_toy.yaml")  # a search spec
OWN = str(ROOT / "sweeps" / "own_model.yaml")  # a spec naming the user's own module and dataset

# Files a user might pass by mistake, written in the working directory before the snapshot.
FILES = {
    "broken.yaml": "name: x\ntask: {name: addition, p: 10\n",
    "empty.yaml": "",
    "list.yaml": "- name: x\n- task: y\n",
    "scalar.yaml": "just a sentence\n",
    "tabs.yaml": "name: x\ntask:\n\tname: addition\n",
    "python-tag.yaml": "!!python/object/apply:os.system ['echo owned']\n",
    "deep.yaml": "a: " + "[" * 1000 + "]" * 1000 + "\n",
    "no-task.yaml": "name: x\nmodel: {name: toy}\noptim: {decoder: {name: adamw, lr: 0.001}}\n",
    "a-file.txt": "not a spool and not a spec\n",
}
for _prefix, _text in (("", Path(Q).read_text()), ("search-", Path(D).read_text())):  # a grid's and a search's
    FILES.update({
        f"{_prefix}unknown-key.yaml": _text + "colour: red\n",
        f"{_prefix}unknown-model.yaml": _text.replace("name: toy,", "name: toyy,"),
        f"{_prefix}not-prime.yaml": _text.replace("{name: addition, p: 10, train_size: 45}",
                                                  "{name: modular, op: div, p: 12, train_fraction: 0.5}"),
        f"{_prefix}slash-name.yaml": _text.replace("name: quickstart", "name: ../../etc/x").replace(
            "name: degrok-toy", "name: ../../etc/x"),
    })
FILES["laughs.yaml"] = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(  # a YAML "billion laughs": 9^9 items
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)) + "name: *i\n"
BINARY = {"binary.yaml": b"\x00\xff\xfe\x80garbage"}

SPEC_FILES = [  # (spec file, the field the line names): for run, train and search alike
    ("missing.yaml", "spec"), ("broken.yaml", "spec"), ("empty.yaml", "spec"), ("list.yaml", "spec"),
    ("scalar.yaml", "spec"), ("tabs.yaml", "spec"), ("python-tag.yaml", "spec"), ("deep.yaml", "spec"),
    ("binary.yaml", "spec"), ("a-file.txt", "spec"), (".", "spec"), ("no-task.yaml", "task"),
    ("unknown-key.yaml", "colour"), ("unknown-model.yaml", "model.name"), ("not-prime.yaml", "task.p"),
    ("slash-name.yaml", "name"), ("laughs.yaml", "spec"),
]

OVERRIDES = [  # (-s KEY=VALUE on the quickstart, the field the line names)
    ("optim.decoder.lr=-1", "optim.decoder.lr"), ("optim.decoder.lr=nan", "optim.decoder.lr"),
    ("optim.decoder.lr=inf", "optim.decoder.lr"), ("optim.decoder.lr=fast", "optim.decoder.lr"),
    ("optim.decoder.weight_decay=-1", "optim.decoder.weight_decay"),
    ("optim.decoder.name=sgdd", "optim.decoder.name"), ("optim.decoder.momentum=0.9", "optim.decoder.momentum"),
    ("optim.decoder.betas=[0.9]", "optim.decoder.betas"), ("optim.decoder.betas=[0.9,1.5]", "optim.decoder.betas"),
    ("optim.decoder.eps=-1e-8", "optim.decoder.eps"), ("optim.decoderr.lr=0.01", "optim.decoderr"),
    ("optim.embedding.lr=-0.1", "optim.embedding.lr"), ("optim.decoder.init_scale=-1", "optim.decoder.init_scale"),
    ("task.name=additon", "task.name"), ("task.p=0", "task.p"), ("task.p=-3", "task.p"), ("task.p=2.5", "task.p"),
    ("task.train_size=0", "task.train_size"), ("task.train_size=1000", "task.train_size"),
    ("task.train_size=-5", "task.train_size"), ("task.train_fraction=1.5", "task.train_fraction"),
    ("task.colour=red", "task.colour"), ("model.name=bogus", "model.name"), ("model.embed_dim=0", "model.embed_dim"),
    ("model.embed_dim=-1", "model.embed_dim"), ("model.hidden=[0]", "model.hidden"),
    ("model.activation=swish2", "model.activation"), ("model.head=bogus", "model.head"),
    ("model.widht=3", "model.widht"), ("train.steps=0", "train.steps"), ("train.steps=-10", "train.steps"),
    ("train.steps=ten", "train.steps"), ("train.steps=1.5", "train.steps"), ("train.batch_size=0", "train.batch_size"),
    ("train.batch_size=-1", "train.batch_size"), ("train.batch_size=half", "train.batch_size"),
    ("train.colour=red", "train.colour"), ("phases.threshold=1.5", "phases.threshold"),
    ("phases.threshold=-0.1", "phases.threshold"), ("phases.budget=-1", "phases.budget"),
    ("phases.gap=-1", "phases.gap"), ("phases.colour=1", "phases.colour"), ("seeds=[]", "seeds"),
    ("seeds=[-1]", "seeds"), ("seeds=[1,1]", "seeds"), ("seeds=abc", "seeds"), ("seeds=[1.5]", "seeds"),
    ("resources.cpu=0", "resources.cpu"), ("resources.cpu=-1", "resources.cpu"), ("resources.gpu=-1", "resources.gpu"),
    ("resources.pack_size=0", "resources.pack_size"), ("resources.pack_size=many", "resources.pack_size"),
    ("name=../x", "name"), ("name=a/b", "name"), ("name=", "name"), ("name=" + "n" * 200, "name"),
    ("name=tab\there", "name"), ("colour=red", "colour"), ("optim.decoder.lr", "-s"), ("=3", "-s"),
    ("sweep.optim.decoder.weight_decay.values=[0,0,2]", "sweep.optim.decoder.weight_decay"),
    ("sweep.optim.decoder.weight_decay.values=[]", "sweep.optim.decoder.weight_decay"),
    ("sweep.optim.decoder.lr.logspace=[-4,-2,0]", "sweep.optim.decoder.lr"),
    ("sweep.optim.decoder.lr.logspace=[-4]", "sweep.optim.decoder.lr"),
    ("sweep.model.bogus={values:[1,2]}", "model.bogus"),
    ("sweep.optim.decoder.lr.values=[-1,0.01]", "optim.decoder.lr"),
    # issue 71: numbers no launch could meet, a split with no row on one side, names no terminal shows plainly
    ("train.batch_size=1e12", "train.batch_size"), ("train.batch_size=1000000000000", "train.batch_size"),
    ("train.steps=1000000000000000", "train.steps"), ("phases.budget=1000000000000000", "phases.budget"),
    ("phases.gap=1000000000000000", "phases.gap"),
    ("train.curve_points_per_decade=1000000000", "train.curve_points_per_decade"),
    ("optim.decoder.warmup_steps=1000000000000000", "optim.decoder.warmup_steps"),
    ("model.hidden=[]", "model.hidden"), ("resources.pack_size=1000000000000", "resources.pack_size"),
    ("resources.cpu=1000000", "resources.cpu"), ('seeds="0,1"', "seeds"), ("seeds=[1e30]", "seeds"),
    ("seeds=[100000000000000000000]", "seeds"), ("task.train_size=100", "task.train_size"),
    ('name="x\\Ny"', "name"), ("name=x\u202ey", "name"),
    ("name=x\u2028y", "name"), ("name=\u200b", "name"), ("name=x\x1b[31my", "name"), ("name=x\u200dy", "name"),
]

FLAGS = [  # (launch flags on the quickstart run, the flag the line names)
    (["--tracking-uri", "foo://bar"], "--tracking-uri"), (["--tracking-uri", "::garbage:://%%"], "--tracking-uri"),
    (["--tracking-uri", "sqlite:////nonexistent-dir/x.db"], "--tracking-uri"),
    (["--tracking-uri", "http://"], "--tracking-uri"), (["--tracking-uri", "ftp://example.org/x"], "--tracking-uri"),
    (["--tracking-uri", "sqlite:////etc/hostname/x.db"], "--tracking-uri"),
    (["--tracking-uri", "https://:5000"], "--tracking-uri"), (["--tracking-uri", "postgresql://"], "--tracking-uri"),
    (["--storage", "/proc/grokray-x"], "--storage"), (["--storage", "/etc/hostname/x"], "--storage"),
    (["--storage", "/sys/kernel/grokray"], "--storage"), (["--storage", "a-file.txt"], "--storage"),
    (["--scale", "bogus"], "--scale"), (["--max-concurrent", "0"], "--max-concurrent"),
    (["--max-concurrent", "-3"], "--max-concurrent"), (["--max-concurrent", "two"], "--max-concurrent"),
    (["--checkpoint-every", "0"], "--checkpoint-every"), (["--checkpoint-every", "1e3"], "--checkpoint-every"),
    (["--report-every", "-1"], "--report-every"), (["--report-every", "nan"], "--report-every"),
    (["--report-every", "inf"], "--report-every"), (["--delivery-wait", "-5"], "--delivery-wait"),
    (["--delivery-wait", "nan"], "--delivery-wait"), (["--delivery-wait", "inf"], "--delivery-wait"),
    (["--progress", "sometimes"], "--progress"), (["--address", "127.0.0.1:1"], "--address"),
    (["--address", "not-an-address"], "--address"), (["--bogus"], "--bogus"), (["--resume"], "--resume"),
    (["--checkpoint-every", "1000000000000000000"], "--checkpoint-every"),
    (["--report-every", "1e18"], "--report-every"),
    (["--tracking-uri", ""], "--tracking-uri"), (["--storage", ""], "--storage"),
    (["--max-concurrent", "1000000000000"], "--max-concurrent"), (["--delivery-wait", "1e15"], "--delivery-wait"),
    (["--storage", "loop/results"], "--storage"), (["--tracking-uri", "sqlite:///loop/m.db"], "--tracking-uri"),
]

RUN_ONLY = [(["--max-configs", "0"], "--max-configs"), (["--max-configs", "-1"], "--max-configs"),
            (["--max-configs", "many"], "--max-configs")]
SEARCH_ONLY = [(["--n-trials", "0"], "--n-trials"), (["--n-trials", "-2"], "--n-trials"),
               (["--n-trials", "x"], "--n-trials"), (["-s", "search.n_trials=0"], "search.n_trials"),
               (["-s", "search.sampler=grid_bogus"], "search.sampler"),
               (["-s", "search.objective=fastest"], "search.objective"),
               (["-s", "search.max_concurrent=0"], "search.max_concurrent"),
               (["-s", "search.space.optim.decoder.lr.float=[0.1,0.01]"], "optim.decoder.lr"),
               (["-s", "search.space.model.bogus={float:[0,1]}"], "model.bogus"),
               (["-s", "search.study=../x"], "search.study"),
               (["-s", "search.n_trials=1000000000000"], "search.n_trials"),
               (["-s", "search.n_trials=1e12"], "search.n_trials"),
               (["-s", "search.max_concurrent=1000000000000"], "search.max_concurrent"),
               (["-s", "search.space.optim.decoder.name={categorical:[adamw,adamw]}"], "optim.decoder.name"),
               (["-s", "search.space.optim.decoder.lr={float:[0.001,0.001]}"], "optim.decoder.lr")]
TRAIN_ONLY = [(["--device", "tpu"], "--device"), (["--device", "cuda"], "--device")]

OTHERS = [  # (the whole command, the flag or field the line names)
    (["analyze", "-o", "out"], "--experiment"),
    (["analyze", "--experiment", "quickstart", "-o", "out"], "--tracking-uri"),  # no store here: never created
    (["analyze", "--experiment", "quickstart", "-o", "out", "--tracking-uri", "foo://bar"], "--tracking-uri"),
    (["analyze", "--parent", "abcd1234", "-o", "out"], "--tracking-uri"),
    (["analyze", "--experiment", "q", "--tracking-uri", "sqlite:////nonexistent-dir/x.db", "-o", "o"],
     "--tracking-uri"),
    (["analyze", "--experiment", "quickstart"], "--output"),
    (["analyze", "--experiment", "quickstart", "-o", "out", "--bogus"], "--bogus"),
    (["analyze", "--experiment", "quickstart", "-o", "loop/out"], "-o"),  # a loop of symbolic links
    (["atlas", Q], "--scale"), (["atlas", "--scale", "huge", Q], "--scale"),
    (["atlas", "--scale", "smoke", "missing.yaml"], "spec"), (["atlas", "--scale", "smoke", "broken.yaml"], "spec"),
    (["atlas", "--scale", "smoke", Q, "-o", "/proc/grokray-x"], "-o"),
    (["atlas", "--scale", "smoke", Q, "-o", "a-file.txt"], "-o"),
    (["atlas", "--scale", "smoke", Q, "-o", "loop/x"], "-o"),
    (["atlas", "--scale", "smoke", Q, "--tracking-uri", "foo://bar"], "--tracking-uri"),
    (["atlas", "--scale", "smoke", Q, "--storage", "/proc/grokray-x"], "--storage"),
    (["atlas", "--scale", "smoke", Q, "-s", "train.steps=-1"], "train.steps"),
    (["atlas", "--scale", "smoke", Q, "--pages-only"], "--tracking-uri"),  # no store to read: never created
    (["atlas", "--scale", "smoke", Q, "--progress", "loud"], "--progress"),
    (["atlas", "--scale", "smoke", Q, "--dry-run", "--pages-only"], "--dry-run"),
    (["atlas", "--scale", "smoke", Q, "--dry-run", "--from-data"], "--dry-run"),
    (["atlas", "--scale", "smoke", Q, "--dry-run", "--tracking-uri", "foo://bar"], "--tracking-uri"),
    (["atlas", "--scale", "smoke"], "SPEC"),  # no sweeps/ here
    (["ui", "--tracking-uri", "foo://bar"], "--tracking-uri"), (["ui"], "--tracking-uri"),  # no store: not created
    (["ui", "--tracking-uri", "sqlite:///missing.db"], "--tracking-uri"),
    (["ui", "--port", "-1"], "--port"), (["ui", "--port", "70000"], "--port"), (["ui", "--port", "http"], "--port"),
    (["ui", "--optuna", "missing.journal"], "--optuna"), (["ui", "--optuna", "."], "--optuna"),
    (["replay", "missing-dir"], "--tracking-uri"), (["replay", "a-file.txt"], "dir"),
    (["replay", "missing-dir", "--wait", "-1"], "--wait"), (["replay", "missing-dir", "--wait", "nan"], "--wait"),
    (["replay", "missing-dir", "--wait", "inf"], "--wait"), (["replay", "missing-dir", "--wait", "soon"], "--wait"),
    (["replay", "missing-dir", "--tracking-uri", "foo://bar"], "--tracking-uri"), (["replay"], "dir"),
    (["bogus-command"], "command"), ([], "command"),
    (["train", OWN, "-s", "model.kwargs.widht=3"], "model.kwargs.widht"),
    (["train", OWN, "-s", "model.factory=nowhere.at_all:Net"], "model.factory"),
    (["train", OWN, "-s", "model.loss=hinge"], "model.loss"),
    (["train", OWN, "-s", "task.path=missing.npz"], "task.path"),
]


def _cases() -> list[tuple[list[str], str]]:
    cases = []
    for command, spec in (("run", Q), ("train", Q), ("search", D)):
        prefix = "search-" if command == "search" else ""
        cases += [([command, prefix + name if prefix + name in FILES else name], field) for name, field in SPEC_FILES]
        ovr = [(k, f) for k, f in OVERRIDES if command != "search" or not k.startswith("sweep.")]
        cases += [([command, spec, "-s", kv], field) for kv, field in ovr]
    for command, spec in (("run", Q), ("search", D)):
        cases += [([command, spec, *flags], flag) for flags, flag in FLAGS]
    cases += [(["run", Q, *f], flag) for f, flag in RUN_ONLY] + [(["search", D, *f], flag) for f, flag in SEARCH_ONLY]
    cases += [(["train", Q, *f], flag) for f, flag in TRAIN_ONLY] + OTHERS
    return cases


CASES = _cases()


def test_the_bad_inputs_are_many_and_distinct():
    keys = [tuple(argv) for argv, _ in CASES]
    assert len(set(keys)) == len(keys) and len(keys) == 443, (len(keys), len(set(keys)))  # 86 from issue 71


def _snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under the roots: path -> (size, mtime) of a file, (-1, 0) of a folder. A refusal
    must leave it equal. A folder's own mtime is left out: the writability probe makes and removes a temporary
    folder, which leaves nothing but that mark."""
    seen = {}
    for root in roots:
        for p in [root, *root.rglob("*")] if root.exists() else []:
            st = p.lstat()
            seen[str(p)] = (-1, 0) if p.is_dir() else (st.st_size, st.st_mtime_ns)
    return seen


def _ray_sessions() -> set[str]:
    """Ray sessions this process started (Ray names a session by its date and the starting process's pid): other
    test processes may start their own meanwhile (make test runs two)."""
    base = Path("/tmp/ray")
    mine = f"_{os.getpid()}"
    return {p.name for p in base.iterdir() if p.name.endswith(mine)} if base.exists() else set()


class Tripwire(AssertionError):
    """A bad input that got past the checks: it reached something that starts a process or trains."""


@pytest.fixture
def place(tmp_path, monkeypatch):
    work, home, tmp = tmp_path / "work", tmp_path / "home", tmp_path / "tmp"
    for d in (work, home, tmp):
        d.mkdir()
    for name, text in FILES.items():
        (work / name).write_text(text)
    for name, data in BINARY.items():
        (work / name).write_bytes(data)
    (work / "loop").symlink_to("loop")  # a loop of symbolic links (issue 71: tracebacks)
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    for name in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)

    popen = subprocess.Popen

    def trip(*args, **kwargs):
        if args and isinstance(args[0], list) and args[0][:1] == ["uname"]:  # the platform module asks the OS
            return popen(*args, **kwargs)
        raise Tripwire(f"accepted: reached {args[:1]}")

    import grokray.engine

    monkeypatch.setattr(subprocess, "Popen", trip)
    monkeypatch.setattr(grokray.engine, "run_trial", trip)
    return work, home, tmp


@pytest.mark.parametrize("argv, name", CASES, ids=[" ".join(a).replace(str(ROOT) + "/", "") for a, _ in CASES])
def test_a_bad_input_is_one_line_exit_2_and_writes_nothing(argv, name, place, capsys):
    from grokray.cli import main

    before, sessions = _snapshot(*place), _ray_sessions()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("grokray: error:") and name in err[0], err
    assert _snapshot(*place) == before and _ray_sessions() == sessions
