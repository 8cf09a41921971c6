"""Issue 52: every bad launch input is one line naming the option and what is allowed, exit 2, before Ray starts or
any file or folder is made (the cwd and the storage stay empty). Here through the real `python -m grokray` process
(a few cases) and the dry-run and --resume refusals; tests/test_bad_inputs.py holds the full set in-process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = str(ROOT / "sweeps" / "quickstart.yaml")
CASES = [  # (extra arguments, the option the line must name); tests/test_bad_inputs.py holds 437 in-process
    (["--tracking-uri", "foo://bar"], "--tracking-uri"),
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


DRY_RUN_CASES = [  # issue 61: a dry-run refuses what the launch refuses (each exited 0 before)
    (["--tracking-uri", "foo://bar"], "--tracking-uri"),
    (["--tracking-uri", "sqlite:////nonexistent-dir/x.db"], "--tracking-uri"),
    (["--storage", "/proc/grokray-x"], "--storage"),
    (["-s", "resources.gpu=0.25"], "resources.gpu"),
    (["--tracking-uri", "postgresql://u:pw@127.0.0.1:1/db"], "--tracking-uri"),  # a closed port: hung, 216 lines
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


@pytest.fixture(scope="module")
def a_store(tmp_path_factory) -> bytes:
    """The bytes of a small real MLflow SQLite store (4 runs of 500 points)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("store") / "mlflow.db"
    client = MlflowClient(f"sqlite:///{path}")
    exp = client.create_experiment("quickstart")
    for _ in range(4):
        run = client.create_run(exp).info.run_id
        client.log_batch(run, metrics=[mlflow.entities.Metric("train/acc", 0.5, 1, s) for s in range(500)])
    data = path.read_bytes()
    assert int.from_bytes(data[36:40], "big") == 0  # no page on the freelist: every b-tree page is one SQLite reads
    return data


def damaged(data: bytes, how: str) -> bytes:
    if how == "bad header":
        return b"\x00" * 16 + data[16:]
    if how == "cut to 60%":
        return data[: int(len(data) * 0.6)]
    flipped = bytearray(data)  # "flipped pages": every 97th byte, header on, of four pages that hold rows
    size = int.from_bytes(data[16:18], "big")
    for page in pages_holding_rows(data, size)[:4]:
        for offset in range(page, page + size, 97):
            flipped[offset] ^= 0x5A
    return bytes(flipped)


def pages_holding_rows(data: bytes, size: int) -> list[int]:
    """The offsets of the b-tree pages in the file's last two thirds that hold cells. Bytes anywhere else may be
    bytes SQLite never reads: the free space of an empty table's page (MLflow 3.18's migrations leave empty tables
    at a third of the file; flipping there, CI's store was sound to SQLite 17 times in 40)."""
    btree_types = (2, 5, 10, 13)
    return [page for page in range(len(data) // 3 // size * size, len(data), size)
            if data[page] in btree_types and int.from_bytes(data[page + 3:page + 5], "big") > 0]


@pytest.mark.parametrize("how", ["bad header", "cut to 60%", "flipped pages"])
@pytest.mark.parametrize("command", ["run", "analyze"])
def test_a_damaged_sqlite_store_is_one_line_before_anything_starts(a_store, how, command, tmp_path, monkeypatch,
                                                                   capsys):
    """Issue 71: a store corrupted between Ctrl-C and --resume was a 45-line sqlite3.DatabaseError traceback from
    the WAL switch, after Ray had started. Now SQLite's own read-only check refuses it first, naming the flag."""
    from grokray.cli import main

    store = tmp_path / "mlflow.db"
    store.write_bytes(damaged(a_store, how))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for name in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    args = ([SPEC, "--scale", "smoke", "--storage", str(tmp_path / "results")] if command == "run"
            else ["--experiment", "quickstart", "-o", str(tmp_path / "figures")])
    code = main([command, *args, "--tracking-uri", f"sqlite:///{store}"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("grokray: error: --tracking-uri:") and str(store) in lines[0]
    assert "restore it from a copy" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db", "work"] and list(work.iterdir()) == []
    assert store.read_bytes() == damaged(a_store, how)  # read only: not "repaired", not switched to WAL


def test_a_sound_store_passes_the_check(a_store, tmp_path):
    from grokray.tracking.uri import sqlite_file_problem

    (tmp_path / "ok.db").write_bytes(a_store)
    assert sqlite_file_problem(tmp_path / "ok.db") is None
    assert sqlite_file_problem(tmp_path / "not-there.db") is None


@pytest.mark.parametrize("command", ["run", "search", "analyze", "replay"])
def test_an_in_memory_store_no_process_holds_is_one_line_before_anything_starts(command, tmp_path, monkeypatch,
                                                                                capsys):
    """Issue 71: `--tracking-uri memory:///tmp/x` with no grokray holding it passed the dry-run, and run, search,
    analyze and replay started Ray and died with ConnectionRefusedError tracebacks (43 lines, 63 files)."""
    from grokray.cli import main

    work = tmp_path / "work"
    (work / "spool").mkdir(parents=True)
    monkeypatch.chdir(work)
    for name in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    uri = f"memory://{tmp_path}/gone"
    args = {"run": [SPEC, "--scale", "smoke"], "search": [str(ROOT / "sweeps" / "degrok_toy.yaml"), "--scale", "smoke"],
            "analyze": ["--experiment", "quickstart", "-o", "figures"], "replay": ["spool"]}[command]
    code = main([command, *args, "--tracking-uri", uri])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("grokray: error: --tracking-uri: no process holds the in-memory store"), lines
    assert "open_tracker('memory://')" in lines[0]
    assert [p.name for p in work.iterdir()] == ["spool"] and list((work / "spool").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_an_in_memory_store_this_process_holds_passes_the_check():
    from grokray.tracking.memory import RemoteTracker
    from grokray.tracking.trackers import open_tracker
    from grokray.tracking.uri import memory_store_problem

    tracker = open_tracker("memory://")
    assert memory_store_problem(tracker.uri) is None and memory_store_problem(tracker.uri) is None
    exp = RemoteTracker(tracker.uri).ensure_experiment("still-answers")  # the probes left its socket serving
    assert tracker.experiment_id("still-answers") == exp
    assert memory_store_problem(tracker.uri + "-not-it") is not None


@pytest.mark.parametrize("state", ["no such launch", "finished", "unrestorable"])
def test_resume_is_answered_before_ray_starts_or_a_file_is_written(state, tmp_path, monkeypatch, capsys):
    """Issue 71: with a store that holds no interrupted launch of the spec, --resume started Ray and wrote 63 files
    before saying so, and --resume of a finished launch took 75 s (Ray's start) to say there was nothing to do."""
    import ray
    from mlflow.tracking import MlflowClient

    from grokray.cli import main
    from grokray.spec.build import load_spec
    from grokray.tracking.schema import EXPERIMENT_PATH_TAG, KIND_TAG, PARENT, ROLE_TAG, SPEC_HASH_TAG

    monkeypatch.chdir(tmp_path)
    for name in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    spec = load_spec(SPEC, [], "smoke")
    exp = client.create_experiment(spec.name)
    if state != "no such launch":  # a parent of this very spec, as a launch leaves it
        run = client.create_run(exp, tags={ROLE_TAG: PARENT, SPEC_HASH_TAG: spec.hash(), KIND_TAG: "grid",
                                           EXPERIMENT_PATH_TAG: str(tmp_path / "gone")})
        client.set_terminated(run.info.run_id, "FINISHED" if state == "finished" else "KILLED")
    capsys.readouterr()
    code = main(["run", SPEC, "--scale", "smoke", "--resume", "--tracking-uri", uri,
                 "--storage", str(tmp_path / "results")])
    out, err = capsys.readouterr()
    assert not ray.is_initialized()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("mlflow.db")) == []
    if state == "finished":
        assert code == 0 and "--resume has nothing to continue and changed nothing" in out, out + err
    else:
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("grokray: error: --resume: no interrupted grid"), \
            lines


RAY_TIMEOUT = ("The current node timed out during startup. This could happen because some of the raylet failed to "
               "startup or the GCS has become overloaded.")  # Ray's own words, after its fixed 30 s


def test_a_private_ray_that_misses_its_start_up_wait_is_tried_again_then_said_in_one_line(monkeypatch):
    """Issue 71: at a load above 15 on 2 cores Ray's node missed its fixed 30-s start-up wait in 7 of 10 launches:
    a 30-line traceback, exit 1 (read as "a trial failed"). Ray's start is made to fail here as it fails there (a
    busy machine is not something a test can own); the retry and the line are grokray's."""
    import ray

    from grokray.errors import RayDidNotStart
    from grokray.run.cluster import start_local_ray

    calls, shutdowns = [], []
    monkeypatch.setattr(ray, "shutdown", lambda: shutdowns.append(1))

    def slow_then_up():
        calls.append(1)
        if len(calls) == 1:
            raise Exception(RAY_TIMEOUT)

    start_local_ray(slow_then_up)
    assert len(calls) == 2 and len(shutdowns) == 1  # the second try started it

    def never_up():
        calls.append(1)
        raise Exception(RAY_TIMEOUT)

    calls.clear()
    with pytest.raises(RayDidNotStart, match=r"Ray did not start \(2 tries.*load \d+\.\d on \d+ cores.*--address"):
        start_local_ray(never_up)
    assert len(calls) == 2

    def broken():
        raise ValueError("not a start-up timeout")

    with pytest.raises(ValueError):  # anything else is not retried
        start_local_ray(broken)


def test_a_launch_whose_ray_never_starts_exits_4_with_one_line_and_trains_nothing(tmp_path, monkeypatch, capsys):
    import ray

    from grokray.cli import main

    monkeypatch.chdir(tmp_path)
    for name in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    tries = []

    def busy_init(*args, **kwargs):
        tries.append(kwargs.get("address"))
        raise Exception(RAY_TIMEOUT)

    monkeypatch.setattr(ray, "init", busy_init)
    code = main(["run", SPEC, "--scale", "smoke", "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db",
                 "--storage", str(tmp_path / "results")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 4 and tries == ["local", "local"], (code, tries, err)
    assert [line for line in err if "Ray did not start" in line] == [err[-1]] and "Traceback" not in "".join(err)
    assert err[-1].startswith("grokray: Ray did not start (2 tries")
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*.pt"))
