"""Divergence: a pack in which some members blow up (NaN/inf loss) finishes; those members are tagged
`grokray.phase = diverged` in MLflow, and the others train exactly as they would alone."""

import math
import time

import yaml
from conftest import open_parent
from mlflow.tracking import MlflowClient

from grokray.engine import make_trainer
from grokray.plan.expand import expand
from grokray.spec.build import build_spec
from grokray.tracking.pack_runs import PackTracker

SPEC = {
    "name": "diverge",
    "task": {"name": "modular", "op": "add", "p": 11, "train_fraction": 0.5},
    "model": {"name": "toy", "embed_dim": 4, "hidden": [16]},
    "optim": {"default": {"name": "sgd", "lr": 0.1}},
    "train": {"steps": 200, "batch_size": "full"},
    "phases": {"budget": 200, "gap": 50, "stop_when_classified": False},
    "seeds": [0],
    "sweep": {"optim.default.lr": {"values": [0.1, 1.0e12, 0.3, 1.0e15]}},
    "resources": {"pack_size": 4},
}


def test_diverging_members_are_tagged_and_the_rest_unaffected(tmp_path):
    spec = build_spec(yaml.safe_load(yaml.safe_dump(SPEC)))
    plan = expand(spec, slots=1)
    [pack] = plan.packs
    configs = [m.config for m in pack.members]
    assert len(configs) == 4
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    _, ctx = open_parent(uri, spec, plan, tmp_path / "spool")
    pack_dict = plan.pack_dicts()[0]

    trainer = make_trainer(configs)
    assert trainer.run() is True  # the pack finishes
    results = trainer.results()
    tracker = PackTracker(ctx, pack_dict)
    tracker.open()
    tracker.log_curves(results)
    tracker.finish(results, [c.phases.threshold for c in configs], [time.time()] * len(configs))
    assert tracker.close() == 0

    phases = [r.phase for r in results]
    assert phases[1] == phases[3] == "diverged" and "diverged" not in (phases[0], phases[2])
    client = MlflowClient(uri)
    for run, result, cfg in zip(tracker.runs, results, configs, strict=True):
        data = client.get_run(run.run_id)
        assert data.info.status == "FINISHED"
        assert data.data.tags["grokray.phase"] == result.phase
        for key in ("train/loss", "val/acc"):  # no NaN or inf point ever reaches MLflow
            assert all(math.isfinite(m.value) for m in client.get_metric_history(run.run_id, key))
        if result.phase == "diverged":
            continue
        solo = make_trainer([cfg])  # the same configuration alone
        solo.run()
        [alone] = solo.results()
        assert alone.phase == result.phase and alone.steps_run == result.steps_run
        for key, values in alone.curve.items():
            if key == "weight_norm":  # a float32 reduction over the stacked rows: equal to rounding
                worst = max(abs(a - b) / abs(a) for a, b in zip(values, result.curve[key], strict=True))
                assert worst < 1e-6, worst
            else:  # accuracies, losses, steps: bit-identical, a diverged neighbour changes nothing
                assert values == result.curve[key], key
