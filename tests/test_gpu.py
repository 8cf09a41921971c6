"""The engine on CUDA (issue 29): every family trains there, a pack equals its members trained alone, a GPU
checkpoint resumes, and the cost probe times the device. Marker `gpu`, skipped where torch sees no CUDA: on the GPU
machine run `pytest -m gpu` (benchmarks/gpu_session.sh does, with the pack benchmark)."""

import pytest
import torch
from test_model_contract import FAMILIES, example
from test_pack import BASE, MEMBERS, assert_same, configs

from grokray.engine import PackTrainer, load_checkpoint, make_trainer, save_checkpoint
from grokray.engine.cost import step_seconds

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_trains_on_cuda_as_on_the_cpu(name):
    cfg = example(name)
    on_gpu, on_cpu = make_trainer([cfg], device="cuda"), make_trainer([cfg])
    on_gpu.run()
    on_cpu.run()
    gpu, cpu = on_gpu.results()[0], on_cpu.results()[0]
    assert gpu.curve["step"] == cpu.curve["step"] and gpu.steps_run == cpu.steps_run
    # float32 on two devices: the same training to rounding, not bit for bit
    assert gpu.curve["train/loss"][-1] == pytest.approx(cpu.curve["train/loss"][-1], rel=1e-2, abs=1e-5)
    [state] = on_gpu.member_states()  # what a checkpoint or MLflow gets is on the host
    assert all(t.device.type == "cpu" for t in state.values())


def test_a_float32_pack_equals_its_members_alone_on_cuda():
    float32 = {**BASE, "train": {**BASE["train"], "dtype": "float32"}}
    cfgs = configs(MEMBERS, float32)
    pack = PackTrainer(cfgs, device="cuda")
    pack.run()
    for cfg, packed in zip(cfgs, pack.results(), strict=True):
        solo = PackTrainer([cfg], device="cuda")
        solo.run()
        assert_same(packed, solo.results()[0], tol=1e-5)


def test_a_checkpoint_written_on_cuda_resumes_there(tmp_path):
    cfgs = configs(MEMBERS[:3])
    whole = PackTrainer(cfgs, device="cuda")
    whole.run()
    part = PackTrainer(cfgs, device="cuda")
    part.run(until=77)
    save_checkpoint(part, tmp_path / "pack.pt")
    resumed = PackTrainer(cfgs, device="cuda")
    load_checkpoint(resumed, tmp_path / "pack.pt")
    resumed.run()
    for group, flat in whole.model.flat.items():
        assert flat.device.type == "cuda" and torch.allclose(flat, resumed.model.flat[group], atol=1e-9, rtol=0)
    assert [r.phase for r in whole.results()] == [r.phase for r in resumed.results()]


def test_the_cost_probe_times_a_pack_on_cuda():
    cfgs = configs(MEMBERS[:2])
    seconds = step_seconds(cfgs, device="cuda", min_seconds=0.1)
    assert 0 < seconds < 1.0
    assert make_trainer([example(FAMILIES[0])], device="cuda").device.type == "cuda"


@pytest.mark.parametrize("name", ["toy", "transformer"])
def test_the_captured_step_trains_on_cuda_as_the_eager_step(name):
    """train.capture: compiled on the card (CUDA graphs for the forward and backward) against eager, float64."""
    from test_capture import family_pack

    eager, captured = (PackTrainer(family_pack(name, mode), device="cuda") for mode in ("eager", "compiled"))
    for trainer in (eager, captured):
        trainer.run()
    assert not captured.forward.failed
    for a, b in zip(eager.results(), captured.results(), strict=True):
        assert (a.phase, a.step_train, a.step_val, a.steps_run) == (b.phase, b.step_train, b.step_val, b.steps_run)
        assert a.curve["train/acc"][-1] == pytest.approx(b.curve["train/acc"][-1], abs=1e-3)


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_a_lower_precision_trains_on_cuda(precision):
    cfg = example("toy", f"train.precision={precision}", "train.steps=200", "phases.budget=200")
    trainer = PackTrainer([cfg], device="cuda")
    trainer.run()
    loss = trainer.results()[0].curve["train/loss"]
    assert loss[-1] < loss[0]


def test_a_dry_run_sizes_packs_from_this_cards_memory_and_times_them_there():
    from pathlib import Path

    from grokray.plan.estimate import estimate_plan
    from grokray.plan.expand import expand
    from grokray.spec.build import load_spec

    spec = load_spec(Path(__file__).resolve().parents[1] / "sweeps" / "quickstart.yaml", ["resources.gpu=0.25"])
    plan = expand(spec, slots=4)
    free = torch.cuda.mem_get_info()[0]
    assert plan.gpu_free_bytes is not None and abs(plan.gpu_free_bytes - free) < 0.1 * free
    assert len(plan.packs) == 2  # two large packs a card (plan.expand.GPU_PACKS_PER_CARD), not one per slot
    est = estimate_plan(plan, cpus=16, gpus=1)
    assert torch.cuda.get_device_name() in est.basis and "measured" in est.basis
    assert "GiB" in est.packing and est.slots == 2


def test_a_quarter_gpu_share_trains_four_packs_at_once_on_the_card(tmp_path):
    """`resources.gpu: 0.25` through Ray Tune: four packs, placed on the one card at the same time."""
    from pathlib import Path

    import ray
    from mlflow.tracking import MlflowClient

    from grokray.run.grid import run_sweep
    from grokray.run.options import LaunchOptions
    from grokray.spec.build import load_spec

    spec = load_spec(Path(__file__).resolve().parents[1] / "sweeps" / "quickstart.yaml",
                     ["resources.gpu=0.25", "resources.pack_size=5", "train.steps=6000", "phases.budget=6000",
                      "seeds=[1]", "phases.stop_when_classified=false"])  # 20 configurations: four packs of five
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False)
    try:
        summary = run_sweep(spec, LaunchOptions(tracking_uri=uri, storage=str(tmp_path / "results"),
                                                progress="never"))
    finally:
        ray.shutdown()
    assert summary.errored_trials == 0 and summary.packs == 4 and summary.configurations == 20
    client = MlflowClient(uri)
    runs = client.search_runs([summary.experiment_id], f"tags.mlflow.parentRunId = '{summary.parent_run_id}'")
    spans: dict[str, list[int]] = {}
    for r in runs:
        span = spans.setdefault(r.data.tags["grokray.pack_id"], [r.info.start_time, r.info.end_time])
        span[0], span[1] = min(span[0], r.info.start_time), max(span[1], r.info.end_time)
    assert len(spans) == 4
    assert max(start for start, _ in spans.values()) < min(end for _, end in spans.values())  # all four at once
