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
