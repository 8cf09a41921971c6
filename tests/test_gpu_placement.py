"""GPU placement without a GPU: a real local Ray that declares two GPUs it does not have.

What Ray decides (each pack asks for its GPU share, two packs share a declared card, CUDA_VISIBLE_DEVICES is set
per trial) is read from the trials themselves: each fails, as a pack on a GPU its torch cannot open must, with a
reason naming its placement. A GPU request on a machine without CUDA and without a cluster is refused before Ray
starts or MLflow is written."""

import re
from collections import Counter
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from grokray.errors import SpecError
from grokray.spec.build import load_spec

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"
pytestmark = [pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour of a machine without CUDA"),
              pytest.mark.launch]  # end-to-end launches on a local Ray: make launches (CI), docs/testing.md


def _spec(gpu):
    return load_spec(QUICKSTART, [f"resources.gpu={gpu}", "resources.pack_size=2", "train.steps=50",
                                  "phases.budget=50", "sweep.optim.decoder.lr.logspace=[-4,-2,2]",
                                  "sweep.optim.decoder.weight_decay.values=[0,5]"])  # 4 configs, 2 packs


def test_gpu_request_without_cuda_or_cluster_is_refused_before_anything(tmp_path, monkeypatch, capsys):
    import ray

    from grokray.cli import main
    from grokray.run.grid import run_sweep
    from grokray.run.options import LaunchOptions

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not ray.is_initialized()
    with pytest.raises(SpecError) as err:
        run_sweep(_spec(0.5), LaunchOptions(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db", storage=str(tmp_path)))
    assert err.value.field == "resources.gpu" and "cannot use CUDA" in str(err.value)
    assert main(["run", str(QUICKSTART), "-s", "resources.gpu=0.25"]) == 2
    out = capsys.readouterr().err.strip()
    assert out.startswith("grokray: error: resources.gpu: got 0.25") and "\n" not in out
    assert main(["train", str(QUICKSTART), "--device", "cuda"]) == 2
    assert "cuda requested" in capsys.readouterr().err
    assert not ray.is_initialized() and list(tmp_path.iterdir()) == []  # no Ray session, no MLflow store


@pytest.fixture(scope="module")
def ray_with_declared_gpus():
    import ray

    ray.init(address="local", num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_packs_share_declared_gpus_and_fail_with_their_placement(ray_with_declared_gpus, tmp_path):
    from grokray.run.grid import run_sweep
    from grokray.run.options import LaunchOptions

    spec = load_spec(QUICKSTART, ["resources.gpu=0.5", "resources.pack_size=1", "train.steps=50", "phases.budget=50",
                                  "sweep.optim.decoder.lr.logspace=[-4,-2,2]",
                                  "sweep.optim.decoder.weight_decay.values=[0,5]", "seeds=[1]"])  # 4 packs of one,
    # 0.5 GPU each
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    summary = run_sweep(spec, LaunchOptions(tracking_uri=uri, storage=str(tmp_path / "results"), max_failures=0,
                                           progress="never"))
    # the sweep went on to the end: every pack failed on its own, with the reason, and the parent says FAILED
    assert summary.packs == 4 and summary.errored_trials == 4 and len(summary.trial_errors) == 4
    placed = {}
    for pack_id, reason in summary.trial_errors.items():
        m = re.search(r"placed on GPU \['(\d)'\] \(CUDA_VISIBLE_DEVICES='(\d)', ([\d.]+) GPU requested\) but torch "
                      r"\S+ on node \w+ cannot open CUDA", reason)
        assert m, reason
        gpu_id, visible, share = m.groups()
        assert gpu_id == visible and float(share) == 0.5  # Ray's assignment is what the trial's CUDA sees
        placed[pack_id] = gpu_id
    assert Counter(placed.values()) == {"0": 2, "1": 2}  # two 0.5-GPU packs on each declared card
    client = MlflowClient(uri)
    parent = client.get_run(summary.parent_run_id)
    assert parent.info.status == "FAILED"
    children = client.search_runs([summary.experiment_id], f"tags.mlflow.parentRunId = '{summary.parent_run_id}'")
    assert children == []  # a pack that cannot open its device fails before it opens any run


def test_a_cpu_spec_on_a_ray_with_gpus_trains_on_the_cpus_and_says_so(ray_with_declared_gpus, tmp_path, capsys):
    from grokray.run.grid import run_sweep
    from grokray.run.options import LaunchOptions

    spec = load_spec(QUICKSTART, ["resources.gpu=0", "train.steps=50", "phases.budget=50", "seeds=[1]",
                                  "sweep.optim.decoder.lr.logspace=[-4,-2,2]",
                                  "sweep.optim.decoder.weight_decay.values=[0,5]"])
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    summary = run_sweep(spec, LaunchOptions(tracking_uri=uri, storage=str(tmp_path / "results"), progress="never"))
    assert summary.errored_trials == 0 and summary.configurations == 4
    err = capsys.readouterr().err
    assert "resources.gpu is 0, so the packs train on the CPUs, though Ray has 2 GPUs" in err
    assert "-s resources.gpu=0.25" in err


def test_a_gpu_share_deals_a_sweep_into_two_packs_a_card_sized_from_the_cards_memory():
    """`gpu: 0.25` lets four packs share a card, but auto deals a sweep one pack would hold into two a card (a few
    large packs keep it busy, issue 50), each sized from a quarter of the free memory the dry-run (or the launch)
    measured; where a quarter holds fewer members, into more. The card's reading is passed in here; on CUDA,
    tests/test_gpu.py reads it from the device."""
    from grokray.engine import make_trainer
    from grokray.engine.sizing import GPU_FRACTION, member_bytes
    from grokray.plan.estimate import estimate_plan
    from grokray.plan.expand import expand, local_slots

    spec = load_spec(QUICKSTART, ["resources.gpu=0.25", "seeds=[0,1,2,3]"])  # 80 configurations
    need = member_bytes(make_trainer([spec.first_trial()], device="cpu"))
    assert local_slots(spec, cpus=16, gpus=1) == 4 and local_slots(spec, cpus=16, gpus=2) == 8
    assert local_slots(spec, cpus=2, gpus=1) == 2  # a pack needs its CPU too
    plenty = expand(spec, slots=4, gpu_free_bytes=2**34)
    assert [len(p.members) for p in plenty.packs] == [40] * 2
    assert [len(p.members) for p in expand(spec, slots=8, gpu_free_bytes=2**34).packs] == [20] * 4  # two cards
    tight = expand(spec, slots=4, gpu_free_bytes=int(40 * need / GPU_FRACTION))  # a quarter holds 10 members
    assert max(len(p.members) for p in tight.packs) == 10 and len(tight.packs) == 8
    est = estimate_plan(plenty, cpus=16, gpus=1, calibrate_costs=False)
    assert est.slots == 2 and "0.25 of the GPU's free memory (16.0 GiB)" in est.packing  # two packs, both at once
