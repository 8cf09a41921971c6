"""Bad input, fuzzed: Hypothesis mutates a valid spec (wrong types, out-of-range numbers, unknown keys, empty and
huge axes, non-prime p, NaN strings, deep nesting). Every mutation either passes `grokray run --dry-run` or
fails with exit code 2 and one line naming the field; nothing else escapes, and nothing is written to MLflow.
A sweep larger than --max-configs is refused unless --yes."""

import contextlib
import io
import math
import os
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grokray.cli import main

EXAMPLES = int(os.environ.get("GROKRAY_FUZZ_EXAMPLES", "500"))  # 1,000 took 62 s; test_bad_inputs.py holds 357 more
TRIED = {"examples": 0, "valid": 0, "rejected": 0}

GOOD = {
    "name": "fuzz",
    "task": {"name": "modular", "op": "add", "p": 7, "train_fraction": 0.5},
    "model": {"name": "toy", "embed_dim": 2, "hidden": [8], "activation": "tanh"},
    "optim": {"default": {"name": "adamw", "lr": 1e-3, "weight_decay": 0.0}},
    "train": {"steps": 3, "batch_size": "full"},
    "phases": {"threshold": 0.9, "budget": 3, "gap": 1},
    "seeds": [0, 1],
    "sweep": {"optim.default.lr": {"logspace": [-4, -2, 3]}, "optim.default.weight_decay": {"values": [0, 1]}},
    "resources": {"cpu": 1, "pack_size": "auto"},
}


def _paths(node, prefix=()):
    """Every (path, value) of the spec, mappings and lists included."""
    out = [(prefix, node)] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


PATHS = [p for p, _ in _paths(GOOD)]
MAPPINGS = [()] + [p for p, v in _paths(GOOD) if isinstance(v, dict)]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "", "1e400", "full", "auto", "7", "1e-3", "\x00", "ä" * 3]),
    st.text(max_size=12),
)
out_of_range = st.sampled_from([0, -1, -1e-9, 1.5, 2, 10**9, 10**15, 1e308, -1e308, float("inf")])


def deep(depth):
    node = "x"
    for i in range(depth):
        node = {"k": node} if i % 2 else [node]
    return node


values = st.one_of(
    scalars,
    out_of_range,
    st.lists(scalars, max_size=4),
    st.dictionaries(st.text(max_size=6), scalars, max_size=3),
    st.integers(1, 120).map(deep),
)
axes = st.one_of(
    st.just({"values": []}),
    st.just({}),
    st.lists(scalars, min_size=1, max_size=6).map(lambda v: {"values": v}),
    st.tuples(st.sampled_from(["linspace", "logspace", "range"]), st.lists(values, max_size=4))
    .map(lambda t: {t[0]: t[1]}),
    st.tuples(st.sampled_from(["linspace", "logspace"]), st.integers(10**5, 10**13))
    .map(lambda t: {t[0]: [0, 1, t[1]]}),  # huge axes
    st.integers(1, 10**12).map(lambda n: {"range": [0, n, 1]}),
    st.integers(2, 150).map(lambda n: {"linspace": [1e-4, 1e-2, n]}),  # big but valid (up to the --max-configs 300)
)
sweep_keys = st.one_of(st.sampled_from([".".join(map(str, p)) for p in PATHS if p[0] in
                                        ("task", "model", "optim", "train", "phases")]), st.text(max_size=15))


@st.composite
def mutated(draw):
    spec = yaml.safe_load(yaml.safe_dump(GOOD))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["replace", "unknown_key", "axis", "non_prime", "delete"]))
        if kind == "replace":
            path = draw(st.sampled_from(PATHS))
            _set(spec, path, draw(values))
        elif kind == "unknown_key":
            path = draw(st.sampled_from(MAPPINGS))
            node = _get(spec, path)
            if isinstance(node, dict):
                node[draw(st.text(min_size=1, max_size=10))] = draw(values)
        elif kind == "axis":
            if not isinstance(spec.get("sweep"), dict):
                spec["sweep"] = {}
            spec["sweep"][draw(sweep_keys)] = draw(axes)
        elif kind == "non_prime":
            task = spec.get("task") if isinstance(spec.get("task"), dict) else {}
            task.update(op=draw(st.sampled_from(["div", "add", "sub", "x2y2"])),
                        p=draw(st.sampled_from([0, 1, 4, 9, 15, 21, 91, 97, -7, 7.5, 121, 1001])))
            spec["task"] = task
        else:
            path = draw(st.sampled_from(PATHS))
            parent = _get(spec, path[:-1])
            if isinstance(parent, dict) and path[-1] in parent:
                del parent[path[-1]]
    return spec


def _get(node, path):
    for k in path:
        try:
            node = node[k]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def _set(spec, path, value):
    parent = _get(spec, path[:-1])
    try:
        parent[path[-1]] = value
    except (KeyError, IndexError, TypeError):
        pass


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory() as d:
        old = os.getcwd()
        os.chdir(d)
        os.environ["MLFLOW_TRACKING_URI_BEFORE_FUZZ"] = os.environ.get("MLFLOW_TRACKING_URI", "")
        try:
            yield Path(d)
        finally:
            os.chdir(old)


def dry_run(path: Path, *extra) -> tuple[int, str, str]:
    """The dry run's validation and expansion; its cost calibration (which trains each spec a little) is the
    subject of test_cost.py, not of a thousand fuzzed specs."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", str(path), "--dry-run", "--no-calibrate", "--max-configs", "300", *extra])
    return code, out.getvalue(), err.getvalue()


def test_fuzzed_specs_are_valid_or_errors_of_one_line_each(workdir, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir}/must-not-exist.db")
    path = workdir / "spec.yaml"
    t0 = time.perf_counter()

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(mutated())
    def check(spec):
        TRIED["examples"] += 1
        path.write_text(yaml.safe_dump(spec, allow_unicode=True))
        code, out, err = dry_run(path)
        if code == 0:
            TRIED["valid"] += 1
            assert "configurations:" in out and not err
            return
        TRIED["rejected"] += 1
        assert code == 2, (code, err)
        lines = err.strip().splitlines()
        if len(lines) > 1:  # every mistake on its own line, then how many
            assert lines[-1] == f"grokray: {len(lines) - 1} mistakes; nothing was run", err
            lines = lines[:-1]
        assert "Traceback" not in err
        for line in lines:  # the field's dotted name, then what is wrong with it
            assert line.startswith("grokray: error: "), err
            assert ": " in line[len("grokray: error: "):] and not line.startswith("grokray: error: :"), err

    check()
    elapsed = time.perf_counter() - t0
    print(f"\nfuzz: {TRIED['examples']} examples ({TRIED['valid']} valid, {TRIED['rejected']} rejected) "
          f"in {elapsed:.1f} s")
    assert TRIED["examples"] >= EXAMPLES and TRIED["valid"] > 0 and TRIED["rejected"] > EXAMPLES // 2
    assert not (workdir / "must-not-exist.db").exists() and not (workdir / "mlruns").exists()  # no MLflow write


def test_known_bad_inputs_name_their_field(workdir):
    path = workdir / "spec.yaml"
    cases = {
        ("task", "p"): ({"op": "div", "p": 21}, "task.p"),
        ("task",): ({"name": "modular", "op": "div", "p": 1000003}, "task.p: got 1000003; must be >= 2 and <= 5000"),
        # a prime: refused by its bound, not after probing a 1e12-pair table
        ("train", "steps"): ("nan", "train.steps"),
        ("optim", "default", "lr"): ("NaN", "optim.default.lr"),
        ("model", "hidden"): (deep(80), "model.hidden"),
        ("model", "embed_dim"): (10**9, "model"),  # the sizing probe fails under its memory cap, not the machine
    }
    for where, (value, field) in cases.items():
        spec = yaml.safe_load(yaml.safe_dump(GOOD))
        if isinstance(value, dict) and where[0] == "task":
            spec["task"].update(value)
        else:
            _set(spec, where, value)
        path.write_text(yaml.safe_dump(spec))
        code, _, err = dry_run(path)
        assert code == 2 and err.startswith(f"grokray: error: {field}"), err
    spec = yaml.safe_load(yaml.safe_dump(GOOD))
    spec["sweep"]["train.steps"] = {"linspace": [1, 2, 10**9]}
    path.write_text(yaml.safe_dump(spec))
    code, _, err = dry_run(path)
    assert code == 2 and err.startswith("grokray: error: sweep.train.steps.linspace[2]") and "at most" in err


def test_a_sweep_past_the_limit_asks_for_yes(workdir, monkeypatch):
    spec = yaml.safe_load(yaml.safe_dump(GOOD))
    spec["sweep"] = {"optim.default.lr": {"logspace": [-4, -2, 300]},
                     "optim.default.weight_decay": {"linspace": [0, 1, 300]}}
    spec["seeds"] = [0, 1, 2]  # 270,000 configurations > the default limit of 100,000
    path = workdir / "big.yaml"
    path.write_text(yaml.safe_dump(spec))
    started = []
    import grokray.run.grid as runner

    monkeypatch.setattr(runner, "run_sweep", lambda *a, **k: started.append(1))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["run", str(path)])
    assert code == 2 and not started
    assert err.getvalue().strip() == ("grokray: error: sweep: expands to 270000 configurations, more than the limit "
                                      "100000; rerun with --yes to run them all (or raise --max-configs)")
    code, out, _ = dry_run(path)  # a dry run still tells the size
    assert code == 0 and "270000" in out and "--yes" in out
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["run", str(path), "--max-configs", "10"]) == 2
    assert "limit 10;" in err.getvalue()
    assert math.prod([300, 300, 3]) == 270000
