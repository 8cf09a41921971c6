"""`train.precision` (issue 50): fp32 is the reference; bf16 runs the forward in bfloat16 and still trains; tf32
changes only the matmul precision setting a pack runs under; a float64 pack refuses anything but fp32."""

import pytest
import torch
from test_model_contract import example

from grokray.engine import PackTrainer
from grokray.errors import SpecError


def trained(*overrides, steps=300):
    trainer = PackTrainer([example("toy", f"train.steps={steps}", f"phases.budget={steps}", *overrides)])
    trainer.run()
    return trainer


def test_bf16_runs_the_forward_in_bfloat16_and_still_learns():
    fp32, bf16 = trained(), trained("train.precision=bf16")
    assert bf16.precision == "bf16"
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = bf16.model(bf16.all_points()[0])
    assert out.dtype == torch.bfloat16  # the matmuls ran in bfloat16; the parameters stay float32
    assert all(f.dtype == torch.float32 for f in bf16.model.flat.values())
    a, b = fp32.results()[0], bf16.results()[0]
    assert b.curve["train/loss"][-1] < 0.01 * b.curve["train/loss"][0]  # it trains
    assert b.curve["train/loss"][-1] != a.curve["train/loss"][-1]  # in other arithmetic than fp32's
    assert (b.phase, b.curve["train/acc"][-1]) == (a.phase, a.curve["train/acc"][-1])  # to the same result here


def test_tf32_sets_the_matmul_precision_while_its_pack_runs_and_fp32_sets_it_back():
    trained("train.precision=tf32", steps=5)
    assert torch.get_float32_matmul_precision() == "high"
    trained(steps=5)
    assert torch.get_float32_matmul_precision() == "highest"


def test_a_float64_pack_takes_only_fp32():
    with pytest.raises(SpecError) as err:
        example("toy", "train.dtype=float64", "train.precision=bf16")
    assert "train.precision" in str(err.value) and "fp32" in str(err.value)


def test_an_unknown_precision_names_the_allowed_values():
    with pytest.raises(SpecError) as err:
        example("toy", "train.precision=fp16")
    assert "train.precision" in str(err.value) and "bf16" in str(err.value)
