"""load_runs / load_curves against a real MLflow store (tmp SQLite) written in grokray's tracking layout."""

import json

import pytest

mlflow = pytest.importorskip("mlflow")

from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from analysis.diagram import phase_counts, phase_grid  # noqa: E402
from analysis.load import load_curves, load_runs, parent_runs  # noqa: E402

X, Y = "optim.decoder.lr", "optim.decoder.weight_decay"
CONFIGS = [  # (lr, wd, seed, phase, step_train, step_val)
    ("0.0001", "0", "0", "comprehension", 200, 400),
    ("0.0001", "0", "1", "grokking", 200, 3000),
    ("0.0001", "0", "2", "comprehension", 100, 500),
    ("0.01", "0", "0", "memorization", 50, None),
    ("0.0001", "5", "0", "confusion", None, None),
    ("0.01", "5", "0", "diverged", None, None),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("quickstart")
    swept, log = json.dumps([X, Y, "seed"]), json.dumps([X])
    parent = client.create_run(exp, run_name="quickstart sweep", tags={
        "grokray.role": "parent", "grokray.spec_hash": "abc", "grokray.code_version": "test"}).info.run_id
    ids = []
    for k, (lr, wd, seed, phase, st, sv) in enumerate(CONFIGS):
        run = client.create_run(exp, run_name=f"lr={lr} wd={wd} seed={seed}", tags={
            "mlflow.parentRunId": parent, "grokray.role": "configuration", "grokray.model": "toy",
            "grokray.task": "addition", "grokray.trial_key": f"key{k}", "grokray.pack_id": "p0",
            "grokray.swept": swept, "grokray.log_axes": log})
        rid = run.info.run_id
        params = {X: lr, Y: wd, "seed": seed, "task.p": "10", "task.train_size": "45", "task.train_fraction": "None",
                  "model.hidden": "[200, 200]", "model.activation": "tanh"}
        curve = [Metric(key, min(1.0, s / (st or 1e9) if key == "train/acc" else s / (sv or 1e9)), 0, s)
                 for key in ("train/acc", "val/acc") for s in range(0, 3001, 100)]
        summary = {"steps_run": 3000.0, "final/train/acc": 1.0 if st else 0.1, "final/val/acc": 1.0 if sv else 0.1}
        if st:
            summary["step_train_acc_0.9"] = float(st)
        if sv:
            summary["step_val_acc_0.9"] = float(sv)
        if st and sv:
            summary["grokking_gap"] = float(sv - st)
        client.log_batch(rid, metrics=curve + [Metric(k2, v, 0, 3000) for k2, v in summary.items()],
                         params=[Param(a, b) for a, b in params.items()], tags=[RunTag("grokray.phase", phase)])
        client.set_terminated(rid)
        ids.append(rid)
    counts = {}
    for c in CONFIGS:
        counts[c[3]] = counts.get(c[3], 0) + 1
    for p, n in counts.items():
        client.set_tag(parent, f"grokray.phase_count.{p}", str(n))
    client.set_terminated(parent)
    return uri, parent, ids, client


def test_load_runs_by_experiment_and_parent(store):
    uri, parent, ids, client = store
    df = load_runs("quickstart", tracking_uri=uri)
    assert sorted(df["run_id"]) == sorted(ids)  # children only, the parent is not a row
    same = load_runs(parent_run_id=parent, tracking_uri=uri)
    assert sorted(same["run_id"]) == sorted(ids)
    assert (df["parent_run_id"] == parent).all()
    assert df[X].dtype == float and df[Y].dtype == "int64" and df["task.p"].eq(10).all()
    assert df.attrs["swept"] == [X, Y, "seed"] and df.attrs["log_axes"] == [X]
    row = df[df["trial_key"] == "key1"].iloc[0]
    assert (row["phase"], row["step_train"], row["step_val"], row["gap"]) == ("grokking", 200, 3000, 2800)
    assert row["final/val/acc"] == 1.0 and row["steps_run"] == 3000
    assert "train/acc" not in df.columns


def test_diagram_counts_match_mlflow_tags(store):
    uri, parent, _, client = store
    df = load_runs("quickstart", tracking_uri=uri, latest_parent=True)
    tags = client.get_run(parent).data.tags
    expected = {k.removeprefix("grokray.phase_count."): int(v) for k, v in tags.items()
                if k.startswith("grokray.phase_count.")}
    counts = phase_counts(df)
    assert counts[counts > 0].to_dict() == expected
    grid = phase_grid(df, X, Y)
    assert len(grid.cells) == 4 and grid.x_log
    assert {p: int(grid.cells[f"count_{p}"].sum()) for p in expected} == expected
    cell = grid.cells[(grid.cells[X] == 1e-4) & (grid.cells[Y] == 0)].iloc[0]
    assert (cell.phase, cell.n, cell.agreement) == ("comprehension", 3, pytest.approx(2 / 3))
    parents = parent_runs("quickstart", tracking_uri=uri)
    assert parents["run_id"].tolist() == [parent] and parents.loc[0, "phase_count.comprehension"] == 2


def test_load_curves_long_frame(store):
    uri, _, ids, _ = store
    curves = load_curves(ids[:2], tracking_uri=uri)
    assert list(curves.columns) == ["run_id", "key", "step", "value"]
    assert len(curves) == 2 * 2 * 31
    one = curves[(curves["run_id"] == ids[1]) & (curves["key"] == "val/acc")]
    assert one["step"].is_monotonic_increasing and one["value"].iloc[-1] == 1.0


def test_unknown_experiment_lists_known(store):
    uri = store[0]
    with pytest.raises(ValueError, match="quickstart"):
        load_runs("nope", tracking_uri=uri)
    with pytest.raises(ValueError, match="exactly one"):
        load_runs(tracking_uri=uri)


def test_a_launch_is_labelled_by_its_spec_and_start_not_its_run_id(tmp_path):
    """Issue 52: figures and comparisons of a parent given by id were titled "run c260ba8e"."""
    import time

    from mlflow.tracking import MlflowClient

    from analysis.pipeline import launch_label
    from grokray.run.report import launch_title

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("quickstart"), run_name="quickstart sweep")
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.info.start_time / 1e3))
    assert launch_label(run.info.run_id, uri) == f"quickstart sweep {started}"
    assert launch_label("0" * 32, uri) == "run 00000000"  # a run the store does not hold keeps its id
    assert launch_title("quickstart", run.info.start_time) == f"quickstart {started}"
