"""The launch layer's contract, for every driver in tracking.schema.KINDS, on a real local Ray and a real MLflow
store: each launch goes through `Launch`, its parent run carries the same required tags, its summary and exit code
say what happened, and the atlas skips a piece of any kind once it is complete."""

from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from grokray.run.options import LaunchOptions
from grokray.tracking.pack_runs import RunTarget
from grokray.tracking.parent import missing_parent_tags
from grokray.tracking.schema import CLOSED_PARENT_TAGS, KIND_TAG, KINDS
from grokray.tracking.store import Store
from grokray.worker.context import TrialContext

pytestmark = pytest.mark.launch  # end-to-end launches on a local Ray: make launches (CI), docs/testing.md

ROOT = Path(__file__).resolve().parents[1]
BASE = {
    "task": {"name": "addition", "p": 10, "train_size": 45},
    "model": {"name": "toy", "embed_dim": 1, "hidden": [16, 16], "activation": "tanh", "head": "regression"},
    "optim": {"embedding": {"name": "adam", "lr": 1e-3}, "decoder": {"name": "adamw", "lr": 1e-3}},
    "train": {"steps": 60},
    "phases": {"threshold": 0.9, "budget": 60, "gap": 20},
    "seeds": [0],
    "resources": {"cpu": 1, "pack_size": 3},
    "reduced": {},
}
SPECS = {  # one small figure per driver: a 2x2 grid, an adaptive 3x3 -> 5x5 lattice, a 3-trial search
    "grid": {**BASE, "name": "contract-grid",
             "sweep": {"optim.decoder.lr": {"logspace": [-3, -2, 2]},
                       "optim.decoder.weight_decay": {"values": [0, 1]}}},
    "adaptive": {**BASE, "name": "contract-adaptive",
                 "sweep": {"optim.decoder.lr": {"logspace": [-3, -2, 3]},
                           "optim.decoder.weight_decay": {"values": [0, 1, 2]}},
                 "adaptive": {"start": [3, 3], "target": [5, 5], "budget": 12}},
    "search": {**BASE, "name": "contract-search", "resources": {"cpu": 1, "pack_size": 1},
               "search": {"space": {"optim.decoder.lr": {"float": [1e-3, 1e-2], "log": True}}, "n_trials": 3,
                          "max_concurrent": 2, "objective": "time_to_generalize"}},
}


def test_every_kind_has_a_driver_and_a_spec_here():
    from grokray.drivers import DRIVERS

    assert set(DRIVERS) == set(KINDS) == set(SPECS)


def test_trial_context_round_trips_and_the_worker_rejects_unknown_keys():
    target = RunTarget("sqlite:////x/mlflow.db", "1", "abc", "h", "v", ("a", "b"), ("a",), "/spool", 5.0, 10)
    ctx = TrialContext(target, 100, 0.0, 1.0, 0.0, True, ("time_to_generalize",), 800.0)
    raw = ctx.to_dict()
    assert yaml.safe_load(yaml.safe_dump(raw)) == raw  # plain data: Ray stores it, the worker rebuilds it
    assert TrialContext.from_dict(raw) == ctx
    with pytest.raises(ValueError, match="unknown trial-context keys \\['report_hook'\\]"):
        TrialContext.from_dict({**raw, "report_hook": "x:y"})
    with pytest.raises(ValueError, match="unknown run-target keys \\['api_token'\\]"):
        TrialContext.from_dict({**raw, "target": {**raw["target"], "api_token": "secret"}})
    with pytest.raises(Exception, match="frozen|cannot assign"):
        ctx.cpu = 2.0


@pytest.mark.parametrize(("field", "value", "flag"), [("max_concurrent", 0, "--max-concurrent"),
                                                      ("checkpoint_every", 0, "--checkpoint-every"),
                                                      ("delivery_wait_s", -1.0, "--delivery-wait")])
def test_options_are_checked_before_anything_starts(field, value, flag, tmp_path):
    from grokray.errors import SpecError
    from grokray.run.grid import run_sweep
    from grokray.spec.build import build_spec

    spec = build_spec(yaml.safe_load(yaml.safe_dump(SPECS["grid"])))
    with pytest.raises(SpecError, match=flag):
        run_sweep(spec, LaunchOptions(**{field: value}, tracking_uri=f"sqlite:///{tmp_path}/mlflow.db"))
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_each_driver_launches_through_the_same_layer_and_the_atlas_skips_it_once_complete(local_ray, tmp_path,
                                                                                          kind):
    from grokray.atlas.plan import plan_figure
    from grokray.atlas.runner import is_complete, run_figure

    path = tmp_path / f"{kind}.yaml"
    path.write_text("# Contract figure.\n# Expected: anything.\n" + yaml.safe_dump(SPECS[kind]))
    figure = plan_figure(path, "reduced")
    [piece] = figure.pieces
    assert piece.kind == kind
    uri, storage = f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "results")
    lines = []
    [record] = run_figure(figure, uri, storage, progress="never", log=lines.append)
    assert record.action == "ran"
    client = MlflowClient(uri)
    parent = client.get_run(record.parent_run_id)
    tags = parent.data.tags
    assert missing_parent_tags(tags) == [] and all(t in tags for t in CLOSED_PARENT_TAGS)
    assert tags[KIND_TAG] == kind and tags["grokray.atlas.piece"] == piece.name
    assert parent.info.status == "FINISHED" and is_complete(Store(uri).run(record.parent_run_id))
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert children and all(c.info.status == "FINISHED" and "grokray.phase" in c.data.tags for c in children)
    assert all(c.data.tags["grokray.spec_hash"] == tags["grokray.spec_hash"] for c in children)
    counted = sum(int(v) for k, v in tags.items() if k.startswith("grokray.phase_count."))
    assert counted == len(children) == int(tags["grokray.configurations"])
    # the same figure again: complete in MLflow, nothing is launched
    [again] = run_figure(figure, uri, storage, progress="never", log=lines.append)
    assert again.action == "skipped" and again.parent_run_id == record.parent_run_id
    assert len(client.search_runs([parent.info.experiment_id], "tags.`grokray.role` = 'parent'")) == 1
