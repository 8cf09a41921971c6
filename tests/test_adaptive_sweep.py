"""An adaptive sweep on a real local Ray and MLflow: rounds of packed Tune runs under one parent; stopped after
its first round and resumed, it finishes with one child run per configuration and no finished trial re-run."""

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from grokray.spec.build import build_spec, read_yaml

pytestmark = pytest.mark.launch  # end-to-end launches on a local Ray: make launches (CI), docs/testing.md

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"


def smoke_spec():
    # 300 steps: on the 3x3 start grid, wd = 0 memorizes at lr >= 1e-3 and the rest is confusion, so round 1
    # refines the cells at that boundary
    raw = read_yaml(QUICKSTART)
    raw["adaptive"] = {"start": [3, 3], "target": [5, 5], "budget": 20}
    return build_spec(raw, ["train.steps=300", "phases.budget=300", "seeds=[1]"])  # one seed: 9 then up to 20


def test_adaptive_sweep_stops_and_resumes_without_rerunning(local_ray, tmp_path):
    from grokray.run.adaptive import run_adaptive
    from grokray.run.options import LaunchOptions

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    spec = smoke_spec()
    opts = dict(tracking_uri=uri, storage=str(tmp_path / "results"), checkpoint_every=100, min_report_s=0.0,
                progress="never")
    first = run_adaptive(spec, LaunchOptions(**opts), max_rounds=1)
    assert first.interrupted and first.rounds == 1 and first.trials == 9 and first.errored_trials == 0
    client = MlflowClient(uri)
    parent = client.get_run(first.parent_run_id)
    assert parent.info.status == "KILLED" and parent.data.tags["grokray.adaptive"] == "true"
    before = {r.data.tags["grokray.trial_key"]: r.info.end_time
              for r in client.search_runs([first.experiment_id], "tags.`grokray.role` = 'configuration'")}
    assert len(before) == 9

    done = run_adaptive(spec, LaunchOptions(resume=True, **opts))
    assert not done.interrupted and done.parent_run_id == first.parent_run_id and done.errored_trials == 0
    assert done.rounds >= 2 and 9 < done.trials <= 20
    children = client.search_runs([done.experiment_id], "tags.`grokray.role` = 'configuration'", max_results=1000)
    keys = [r.data.tags["grokray.trial_key"] for r in children]
    assert len(keys) == len(set(keys)) == done.trials  # one run per configuration
    by_key = {r.data.tags["grokray.trial_key"]: r for r in children}
    for key, end in before.items():
        assert by_key[key].info.end_time == end  # not re-run
    for r in children:
        assert r.data.tags["mlflow.parentRunId"] == done.parent_run_id
        assert r.info.status == "FINISHED" and "grokray.phase" in r.data.tags
        assert r.data.tags["grokray.pack_id"].startswith("r0")
    rounds = sorted(a.path for a in client.list_artifacts(done.parent_run_id, "adaptive"))
    assert rounds[:2] == ["adaptive/round-00.json", "adaptive/round-01.json"]
    parent = client.get_run(done.parent_run_id)
    assert parent.info.status == "FINISHED" and parent.data.metrics["adaptive/trials"] == done.trials

    # the analysis reads the non-uniform point set back onto the 5x5 lattice
    from analysis import load_runs
    from analysis.probability import probability_map

    df = load_runs(parent_run_id=done.parent_run_id, tracking_uri=uri)
    pm = probability_map(df, "optim.decoder.lr", "optim.decoder.weight_decay")
    assert pm.x_log and len(pm.lattice) == 25 and int(pm.lattice["sampled"].sum()) == done.trials
