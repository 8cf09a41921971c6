"""`grokray analyze` and the analysis functions on REAL runs: one tiny real sweep of the quickstart (smoke preset,
final states saved) and a one-configuration rfm sweep, both through `grokray run` on one local Ray started once
for the module, tracked in a tmp SQLite MLflow store."""

import itertools
import os
import re
from pathlib import Path

import pytest
import torch
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from analysis import compare, load_runs, phase_counts, phase_grid
from analysis.artifacts import STATE_ARTIFACT, load_states, representation_metrics
from grokray.cli import main
from grokray.engine import make_trainer
from grokray.errors import SpecError
from grokray.spec.build import load_spec

# three real launches on a local Ray (the module fixture `store`): the launch tier, not `make test`
pytestmark = pytest.mark.launch

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"
RFM = ROOT / "sweeps" / "rfm_fraction.yaml"
X, Y = "optim.decoder.lr", "optim.decoder.weight_decay"
RFM_ARGS = ["--scale", "smoke", "-s", "task.p=11", "-s", "train.steps=4", "-s", "phases.budget=4",
            "-s", "sweep.task.op.values=[add]", "-s", "sweep.model.kernel.values=[gaussian]"]

UNDECODABLE_ARGS = ["-s", "name=quickstart-seed0", "-s", "seeds=[0]", "-s", "sweep.optim.decoder.lr={values: [1e-3]}",
                    "-s", "sweep.optim.decoder.weight_decay={values: [0]}"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Both sweeps through the CLI; Ray is started here once, so `grokray run` joins it instead of starting one."""
    import ray

    tmp = tmp_path_factory.mktemp("analyze")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    common = ["--tracking-uri", uri, "--storage", str(tmp / "results"), "--checkpoint-every", "100"]
    cwd = os.getcwd()
    os.chdir(tmp)  # mlruns/ (the artifact store of a SQLite tracking URI) lands here
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert main(["run", str(QUICKSTART), "--scale", "smoke", "-s", "artifacts.final_state=true", *common]) == 0
        assert main(["run", str(RFM), *RFM_ARGS, "-s", "artifacts.final_state=true", *common]) == 0
        # one configuration on seed 0's split, which withholds sums 0 and 18 (tests/test_ideal_accuracy.py)
        assert main(["run", str(QUICKSTART), "--scale", "smoke", *UNDECODABLE_ARGS, *common]) == 0
    finally:
        ray.shutdown()
        os.chdir(cwd)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("quickstart").experiment_id
    parent = client.search_runs([exp], "tags.`grokray.role` = 'parent'")[0].info.run_id
    return {"uri": uri, "tmp": tmp, "client": client, "exp": exp, "parent": parent}


def _children(store, experiment="quickstart"):
    client = store["client"]
    exp = client.get_experiment_by_name(experiment).experiment_id
    return client.search_runs([exp], "tags.`grokray.role` = 'configuration'", max_results=1000)


def test_diagram_counts_equal_mlflow_tags(store):
    df = load_runs("quickstart", tracking_uri=store["uri"])
    tags = {}
    for r in _children(store):
        tags[r.data.tags["grokray.phase"]] = tags.get(r.data.tags["grokray.phase"], 0) + 1
    counts = phase_counts(df)
    assert counts[counts > 0].to_dict() == tags
    parent_tags = store["client"].get_run(store["parent"]).data.tags
    assert {k.removeprefix("grokray.phase_count."): int(v) for k, v in parent_tags.items()
            if k.startswith("grokray.phase_count.")} == tags
    grid = phase_grid(df, X, Y)
    assert {p: int(grid.cells[f"count_{p}"].sum()) for p in tags} == tags
    spec = load_spec(QUICKSTART, scale="smoke")
    pairs = {(f"{a:.6g}", float(b)) for a, b in itertools.product(spec.axes[X], spec.axes[Y])}
    assert len(grid.cells) == len(pairs) == 8  # one cell per axis pair (one seed)
    assert {(f"{a:.6g}", b) for a, b in zip(grid.cells[X], grid.cells[Y], strict=True)} == pairs
    assert (grid.cells["n"] == 1).all() and grid.x_log and not grid.y_log


def test_an_undecodable_split_is_counted_apart_everywhere(store, capsys):
    """Its memorization says nothing about the model: the parent's counts, the analysis table and the closing
    table all count it as undecodable, as the diagram draws it."""
    (run,) = _children(store, "quickstart-seed0")
    assert run.data.metrics["ideal_val_acc"] < 0.9 and run.data.tags["grokray.phase"] in ("memorization", "confusion")
    exp = store["client"].get_experiment_by_name("quickstart-seed0").experiment_id
    (parent,) = store["client"].search_runs([exp], "tags.`grokray.role` = 'parent'")
    assert {k: v for k, v in parent.data.tags.items() if k.startswith("grokray.phase_count.")} == \
        {"grokray.phase_count.undecodable": "1"}
    assert "| undecodable | 1 | 100% |" in parent.data.tags["mlflow.note.content"]
    counts = phase_counts(load_runs("quickstart-seed0", tracking_uri=store["uri"]))
    assert counts[counts > 0].to_dict() == {"undecodable": 1}
    assert main(["analyze", "--experiment", "quickstart-seed0", "--tracking-uri", store["uri"],
                 "-o", str(store["tmp"] / "seed0")]) == 0
    assert re.search(r"undecodable\s+1\s+100%", capsys.readouterr().out)


def test_compare_with_itself_is_empty(store):
    df = load_runs("quickstart", tracking_uri=store["uri"])
    cmp = compare(df, df, X, Y)
    assert cmp.changed.empty and cmp.transitions.empty and cmp.only_a.empty and cmp.only_b.empty
    assert len(cmp.cells) == 8


def _copy_with_one_phase_changed(store, name="quickstart-copy"):
    """The quickstart's runs copied into a second experiment with MlflowClient; one grokray.phase tag changed."""
    client = store["client"]
    if client.get_experiment_by_name(name) is not None:
        return store["changed"]
    exp = client.create_experiment(name)
    parent = client.create_run(exp, run_name=f"{name} sweep", tags={"grokray.role": "parent"}).info.run_id
    runs = sorted(_children(store), key=lambda r: r.info.run_name)
    for k, r in enumerate(runs):
        tags = {t: v for t, v in r.data.tags.items() if t.startswith("grokray.")}
        tags["mlflow.parentRunId"] = parent
        if k == 0:
            old = tags["grokray.phase"]
            tags["grokray.phase"] = new = "grokking" if old != "grokking" else "comprehension"
            cell = (float(r.data.params[X]), float(r.data.params[Y]))
        run_id = client.create_run(exp, run_name=r.info.run_name).info.run_id
        params = [Param(a, b) for a, b in r.data.params.items()]
        for i in range(0, len(params), 100):
            client.log_batch(run_id, params=params[i:i + 100])
        client.log_batch(run_id, metrics=[Metric(m, v, 0, 0) for m, v in r.data.metrics.items()],
                         tags=[RunTag(t, v) for t, v in tags.items()])
        client.set_terminated(run_id)
    client.set_terminated(parent)
    store["changed"] = (cell, old, new, parent)
    return store["changed"]


def test_compare_with_copy_finds_exactly_the_changed_cell(store):
    (x, y), old, new, _ = _copy_with_one_phase_changed(store)
    a = load_runs("quickstart", tracking_uri=store["uri"])
    b = load_runs("quickstart-copy", tracking_uri=store["uri"])
    cmp = compare(a, b, X, Y)
    assert len(cmp.changed) == 1
    row = cmp.changed.iloc[0]
    assert (row[X], row[Y], row["phase_a"], row["phase_b"]) == (pytest.approx(x), pytest.approx(y), old, new)
    assert cmp.transitions.to_dict("records") == [{"from": old, "to": new, "cells": 1}]
    assert cmp.only_a.empty and cmp.only_b.empty


def test_analyze_cli_writes_table_and_figures_and_logs_them(store, tmp_path, capsys):
    out = tmp_path / "figs"
    assert main(["analyze", "--experiment", "quickstart", "--tracking-uri", store["uri"], "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    for phase, n in phase_counts(load_runs("quickstart", tracking_uri=store["uri"])).items():
        if n:
            assert any(line.split()[:2] == [phase, str(n)] for line in printed.splitlines())
    assert str(out / "phase_diagram.png") in printed
    for f in ("phase_diagram.png", "phase_diagram.svg", "steps_heatmap.png", "steps_heatmap.svg",
              "phase_table.txt", "cells.csv"):
        assert (out / f).stat().st_size > 0, f
    assert (out / "phase_diagram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in (out / "phase_diagram.svg").read_text()[:2000]
    logged = {a.path for a in store["client"].list_artifacts(store["parent"], "analysis")}
    assert {"analysis/phase_diagram.png", "analysis/phase_diagram.svg", "analysis/phase_table.txt"} <= logged


def test_analyze_cli_compare(store, tmp_path, capsys):
    _, old, new, copy_parent = _copy_with_one_phase_changed(store)
    out = tmp_path / "cmp"
    args = ["analyze", "--experiment", "quickstart", "--tracking-uri", store["uri"], "-o", str(out), "--no-log"]
    assert main([*args, "--compare", "quickstart-copy", "--x", X, "--y", Y]) == 0
    assert f"1 cell {old} → {new}" in capsys.readouterr().out
    assert (out / "comparison.png").exists() and (out / "comparison.svg").exists()
    assert (out / "transitions.csv").read_text().splitlines()[1] == f"{old},{new},1"
    assert main([*args, "--compare", copy_parent]) == 0  # a parent run id works too
    assert f"1 cell {old} → {new}" in capsys.readouterr().out
    assert main([*args, "--compare", "quickstart"]) == 0
    assert "no phase changed" in capsys.readouterr().out
    # issue 71: an unknown --compare wrote the 7 diagram files, then refused
    nowhere = tmp_path / "not-written"
    refused = ["analyze", "--experiment", "quickstart", "--tracking-uri", store["uri"], "-o", str(nowhere)]
    assert main([*refused, "--compare", "0123456789abcdef0123456789abcdef"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("grokray: error: --compare:"), err
    assert not nowhere.exists()


def _copy_launch(store, experiment: str, params: dict | None = None, start_ms: int = 0) -> str:
    """The quickstart's launch copied as one more parent run of `experiment` (made if new), its children's params
    changed by `params` (a budget, a threshold); trial keys kept, as a launch of the same spec would have them."""
    client = store["client"]
    found = client.get_experiment_by_name(experiment)
    exp = found.experiment_id if found else client.create_experiment(experiment)
    parent = client.create_run(exp, run_name=f"{experiment} sweep", start_time=start_ms or None,
                               tags={"grokray.role": "parent"}).info.run_id
    for r in _children(store):
        tags = {t: v for t, v in r.data.tags.items() if t.startswith("grokray.")}
        run_id = client.create_run(exp, run_name=r.info.run_name, tags={**tags, "mlflow.parentRunId": parent},
                                   start_time=start_ms or None).info.run_id
        values = {**r.data.params, **(params or {})}
        batch = [Param(a, str(b)) for a, b in values.items()]
        for i in range(0, len(batch), 100):
            client.log_batch(run_id, params=batch[i:i + 100])
        client.log_batch(run_id, metrics=[Metric(m, v, 0, 0) for m, v in r.data.metrics.items()])
        client.set_terminated(run_id)
    client.set_terminated(parent)
    return parent


def test_analyze_names_what_it_read_and_refuses_to_mix_budgets_unless_told(store, tmp_path, capsys):
    """Issue 52: a 300-step launch was compared with a 5,000-step one, and a pool counted a seed twice."""
    base = ["analyze", "--tracking-uri", store["uri"], "-o", str(tmp_path / "m"), "--no-log"]
    budget = int(float(_children(store)[0].data.params["phases.budget"]))
    longer = _copy_launch(store, "quickstart-longer", {"phases.budget": budget * 20, "train.steps": budget * 20})
    assert main([*base, "--experiment", "quickstart", "--compare", "quickstart-longer"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("grokray: error: --compare: the comparison with quickstart-longer mixes") and "\n" not in err
    assert f"budget {budget:g} against {budget * 20:g}" in err and "--mixed" in err
    assert main([*base, "--experiment", "quickstart", "--compare", "quickstart-longer", "--mixed"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("read: quickstart sweep ") and f"(parent {store['parent'][:8]}): 8 runs" in out[0]
    assert out[1].startswith("compared with: quickstart-longer sweep") and longer[:8] in out[1]
    assert f"MIXED (told to mix them): budget {budget:g} against {budget * 20:g}" in out
    from analysis.pipeline import _side, analyze  # issue 61: each panel titled by its launch

    analysis = analyze(tmp_path / "m2", "quickstart", compare_to="quickstart-longer", tracking_uri=store["uri"],
                       log=False, mixed=True)
    assert _side("quickstart", analysis.read).startswith("quickstart sweep 2")
    assert _side("quickstart-longer", analysis.other_read).startswith("quickstart-longer sweep 2")

    # a pool of two launches of one setup: each configuration once, as the latest launch ran it
    one = load_runs("quickstart", tracking_uri=store["uri"])
    _copy_launch(store, "quickstart-twice", start_ms=1_000)
    _copy_launch(store, "quickstart-twice", start_ms=2_000)
    assert main([*base, "--experiment", "quickstart-twice", "--all-parents"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("read: quickstart-twice sweep") == 2
    for phase, n in phase_counts(one).items():
        if n:
            assert any(line.split()[:2] == [phase, str(n)] for line in printed.splitlines()), (phase, printed)
    _copy_launch(store, "quickstart-twice", {"phases.threshold": 0.5}, start_ms=3_000)  # another threshold
    assert main([*base, "--experiment", "quickstart-twice", "--all-parents"]) == 2
    err = capsys.readouterr().err
    assert "--all-parents: the pool of every launch mixes" in err and "threshold 0.5 against 0.9" in err


def test_analyze_cli_errors_are_one_line(store, tmp_path, capsys):
    base = ["analyze", "--tracking-uri", store["uri"], "-o", str(tmp_path / "x"), "--no-log"]
    for extra, needle in ((["--experiment", "nope"], "quickstart"), (["--experiment", "quickstart", "--x", "lr"],
                                                                     "optim.decoder.lr"), ([], "--experiment")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("grokray: error:") and "\n" not in err and needle in err
    # a typo in an axis is blamed on the axis flag, not on --experiment (issue 39)
    assert main([*base, "--experiment", "quickstart", "--y", "optim.decoder.lrr"]) == 2
    assert capsys.readouterr().err.startswith("grokray: error: --y: 'optim.decoder.lrr' is not a parameter")


def test_final_states_saved_and_representation_metrics(store):
    runs = _children(store)
    states = load_states([r.info.run_id for r in runs], tracking_uri=store["uri"])
    assert len(states) == len(runs) == 8
    for r in runs:
        assert STATE_ARTIFACT in [a.path for a in store["client"].list_artifacts(r.info.run_id)]
        assert states[r.info.run_id]["embed"].shape == (10, 1)  # p=10 symbols, embed_dim 1
    df = load_runs("quickstart", tracking_uri=store["uri"])
    reps = representation_metrics(df)
    assert len(reps) == 8 and set(reps["run_id"]) == set(df["run_id"])
    assert reps["rqi"].between(0, 1).all() and reps["pca_entropy"].notna().all()
    assert reps["fourier_top_fraction"].isna().all()  # addition is not modular: no Fourier metric


def test_rfm_final_state_is_m_and_agop_distance(store):
    df = load_runs("rfm-fraction", tracking_uri=store["uri"])
    assert len(df) == 1
    states = load_states(df["run_id"], tracking_uri=store["uri"])
    assert all(s["M"].shape == (22, 22) for s in states.values())  # one-hot(a) + one-hot(b), p = 11
    reps = representation_metrics(df)
    assert reps["agop_circulant_distance"].between(0, 1).all() and reps["rqi"].isna().all()


def test_analyze_representations_flag(store, tmp_path, capsys):
    out = tmp_path / "reps"
    assert main(["analyze", "--experiment", "quickstart", "--tracking-uri", store["uri"], "-o", str(out),
                 "--representations", "--no-log"]) == 0
    assert "representations (8 runs)" in capsys.readouterr().out
    assert (out / "representations.csv").exists()
    phases = set(load_runs("quickstart", tracking_uri=store["uri"])["phase"])
    drawn = {f.stem.rsplit("_", 1)[0].removeprefix("state_") for f in out.glob("state_*.png")}
    assert drawn == phases or (len(phases) > 4 and len(drawn) == 4)  # embedding plots: one per phase first
    rfm_out = tmp_path / "rfm"
    assert main(["analyze", "--experiment", "rfm-fraction", "--tracking-uri", store["uri"], "-o", str(rfm_out),
                 "--representations", "--x", "task.op", "--y", "seed"]) == 0
    assert "agop_circulant_distance" in capsys.readouterr().out
    assert len(list(rfm_out.glob("state_*.svg"))) == 1  # the AGOP image


# -- no Ray needed -------------------------------------------------------------------------------------------
def test_member_states_are_cropped_to_each_members_size():
    spec = load_spec(QUICKSTART, ["model.hidden=[8, 8]", "sweep.model.hidden={values: [[8, 8], [5, 3]]}"],
                     scale="smoke")
    configs = [t for t in spec.trials() if t.optim["decoder"].lr == spec.trials()[0].optim["decoder"].lr
               and t.optim["decoder"].weight_decay == 0][:2]
    assert [c.model.hidden for c in configs] == [[8, 8], [5, 3]]
    packed = make_trainer(configs).member_states()
    for k, cfg in enumerate(configs):
        alone = make_trainer([cfg]).member_states()[0]
        assert packed[k].keys() == alone.keys()
        for name, t in alone.items():
            assert packed[k][name].shape == t.shape, name
            torch.testing.assert_close(packed[k][name], t)


def test_artifacts_spec_key_is_validated():
    assert load_spec(QUICKSTART).artifacts.final_state is False
    assert load_spec(QUICKSTART, ["artifacts.final_state=true"]).artifacts.final_state is True
    with pytest.raises(SpecError, match=r"artifacts\.final_stat\b.*final_state"):
        load_spec(QUICKSTART, ["artifacts.final_stat=true"])
    with pytest.raises(SpecError, match="artifacts"):
        load_spec(QUICKSTART, ["artifacts=3"])


def test_a_parent_by_its_printed_short_id_and_unknown_sources_are_one_line(store, tmp_path, capsys):
    """Issue 61: `--parent` with the 8 characters a page prints, or an unknown id, was an MlflowException
    traceback; `--compare` with an unknown experiment blamed `--experiment`."""
    client = store["client"]
    exp = client.get_experiment_by_name("quickstart").experiment_id
    parent = client.search_runs([exp], "tags.`grokray.role` = 'parent'", max_results=1)[0].info.run_id
    out = tmp_path / "figs"
    assert main(["analyze", "--parent", parent[:8], "--tracking-uri", store["uri"], "-o", str(out), "--no-log"]) == 0
    assert (out / "phase_diagram.png").is_file()
    capsys.readouterr()
    for args, flag in ((["--parent", "0123abcd"], "--parent"), (["--parent", "nope"], "--parent"),
                       (["--experiment", "quickstart", "--compare", "no-such-experiment"], "--compare")):
        assert main(["analyze", *args, "--tracking-uri", store["uri"], "-o", str(tmp_path / "x"), "--no-log"]) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"grokray: error: {flag}:"), lines


def test_analyze_names_a_launch_a_dead_driver_left_running(store, tmp_path, capsys):
    """Issue 61: a SIGKILLed driver left its parent RUNNING with no hint until someone resumed. The reader says
    so in one line, with how to close it; a live driver's running launch gets no such line."""
    import socket
    import subprocess
    import sys

    from grokray.tracking.schema import DRIVER_TAG

    client, parent = store["client"], store["parent"]
    run = client.get_run(parent)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that ran and ended: the killed driver's
    args = ["analyze", "--experiment", "quickstart", "--tracking-uri", store["uri"], "-o", str(tmp_path), "--no-log"]
    try:
        client.update_run(parent, status="RUNNING")
        client.set_tag(parent, DRIVER_TAG, f"{socket.gethostname()}:{os.getpid()}")  # alive: this test's process
        assert main(args) == 0
        assert "left RUNNING" not in capsys.readouterr().out
        client.set_tag(parent, DRIVER_TAG, f"{socket.gethostname()}:{dead.pid}")
        assert main(args) == 0
        said = [line for line in capsys.readouterr().out.splitlines() if "left RUNNING" in line]
        assert len(said) == 1 and f"(pid {dead.pid} on this machine)" in said[0] and parent[:8] in said[0]
        assert "`grokray run SPEC --resume` continues it" in said[0]
    finally:
        client.set_tag(parent, DRIVER_TAG, run.data.tags[DRIVER_TAG])
        client.set_terminated(parent, run.info.status, run.info.end_time)
