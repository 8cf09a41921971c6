"""The de-grokking methods (issue 37): each against its published formula on a hand-built case, each as a pack
member that computes what it computes alone, each validated before anything runs. Their qualitative signatures
at three seeds are in tests/test_degrok_signatures.py."""

import math

import pytest
import torch
from test_pack import BASE, TRANSFORMER, alone, assert_same, configs

from grokray.engine import PackTrainer, pack_signature
from grokray.errors import SpecError
from grokray.models.heads import ClassificationHead, log_stablemax
from grokray.optim.degrok import hold_weight_norm_
from grokray.optim.transforms import TRANSFORMS
from grokray.optim.transforms.orthogonal import orthogonalize_
from grokray.spec.blocks import parse_optim
from grokray.spec.build import build_spec


def transform(name: str, grad, **fields):
    """Transform `name` of optim/transforms/ built over `grad` for a configuration with `fields`."""
    return TRANSFORMS[name].build(grad, [parse_optim(fields, "optim.test")], None)


GRADS = [torch.tensor([[1.0, -2.0], [0.5, 4.0]]), torch.tensor([[3.0, 0.0], [-1.0, 2.0]]),
         torch.tensor([[-1.0, 1.0], [2.0, 2.0]]), torch.tensor([[0.0, 5.0], [1.0, -3.0]])]


def test_grokfast_ema_is_g_plus_lambda_times_the_running_average():
    alpha, lam = torch.tensor([[0.9], [0.5]]), torch.tensor([[2.0], [0.0]])
    f = transform("grokfast_ema", GRADS[0], grad_filter="ema")
    slow = None
    for g in GRADS:
        slow = g.clone() if slow is None else alpha * slow + (1 - alpha) * g  # started at the first gradient
        expected = g + lam * slow
        out = g.clone()
        f.apply_(None, out, {"filter_alpha": alpha, "filter_lambda": lam})
        assert torch.allclose(out, expected)
    assert torch.equal(out[1], GRADS[-1][1])  # lambda 0: the gradient untouched


def test_grokfast_ma_adds_lambda_times_the_window_mean_once_the_window_is_full():
    lam = torch.tensor([[5.0], [1.0]])
    f = transform("grokfast_ma", GRADS[0], grad_filter="ma", filter_window=3)
    for i, g in enumerate(GRADS):
        out = g.clone()
        f.apply_(None, out, {"filter_lambda": lam})
        if i < 2:
            assert torch.equal(out, g)  # the authors' warm-up: nothing until `window` gradients are in
        else:
            mean = torch.stack(GRADS[i - 2: i + 1]).mean(0)
            assert torch.allclose(out, g + lam * mean)


def test_grokfast_ma_stays_exact_over_many_windows():
    torch.manual_seed(0)
    grads = [torch.randn(2, 5, dtype=torch.float64) for _ in range(40)]
    f = transform("grokfast_ma", grads[0], grad_filter="ma", filter_window=4)
    for g in grads:
        out = g.clone()
        f.apply_(None, out, {"filter_lambda": torch.ones(2, 1, dtype=torch.float64)})
    assert torch.allclose(out, grads[-1] + torch.stack(grads[-4:]).mean(0), atol=1e-12)


def test_orthogonal_grad_removes_the_radial_part_and_keeps_the_norm():
    w = torch.tensor([[1.0, 0.0, 3.0, 4.0], [1.0, 0.0, 3.0, 4.0]])
    g = torch.tensor([[1.0, 1.0, 3.0, 4.0], [1.0, 1.0, 3.0, 4.0]])
    on = torch.tensor([[1.0], [0.0]])
    out = g.clone()
    orthogonalize_(w, out, [(0, 2), (2, 4)], on)  # two tensors: [1, 0] and [3, 4]
    assert torch.allclose(out[0, :2], torch.tensor([0.0, math.sqrt(2)]))  # [1, 1] without its [1, 0] part
    assert torch.allclose(out[0, 2:], torch.zeros(2), atol=1e-6)  # parallel to its weights: nothing is left
    assert torch.equal(out[1], g[1])  # the member without ⊥Grad
    for a, b in ((0, 2), (2, 4)):
        assert float((out[0, a:b] * w[0, a:b]).sum()) == pytest.approx(0.0, abs=1e-6)


def test_the_norm_constraint_rescales_moving_members_to_their_targets():
    flats = [torch.tensor([[3.0, 0.0], [1.0, 1.0], [2.0, 0.0]]), torch.tensor([[4.0], [1.0], [0.0]])]
    target = torch.tensor([10.0, math.nan, 1.0], dtype=torch.float64)
    moving = torch.tensor([True, True, False])
    before = [f.clone() for f in flats]
    norm = torch.linalg.vector_norm(torch.cat(flats, 1), dim=1)
    hold_weight_norm_(flats, norm, target, moving)
    norm0 = math.sqrt(sum(float((f[0] ** 2).sum()) for f in flats))
    assert norm0 == pytest.approx(10.0)
    assert torch.allclose(flats[0][0], before[0][0] * 2) and torch.allclose(flats[1][0], before[1][0] * 2)
    assert all(torch.equal(f[1], b[1]) and torch.equal(f[2], b[2]) for f, b in zip(flats, before, strict=True))


def test_stablemax_is_s_over_its_sum():
    logits = torch.tensor([[[0.0, 1.0, -1.0]]], dtype=torch.float64)  # s = 1, 2, 1/2
    assert torch.allclose(log_stablemax(logits).exp(), torch.tensor([[[1 / 3.5, 2 / 3.5, 0.5 / 3.5]]],
                                                                       dtype=torch.float64))
    head = ClassificationHead(3)
    head.stablemax = True
    loss, correct = head.per_sample(logits, torch.tensor([[1]]))
    assert float(loss) == pytest.approx(-math.log(2 / 3.5)) and bool(correct)
    big = torch.tensor([[[200.0, 0.0, 0.0]]])  # float32 softmax rounds this to a loss of exactly 0; StableMax not
    assert float(ClassificationHead(3).per_sample(big, torch.tensor([[0]]))[0]) == 0.0
    assert float(head.per_sample(big, torch.tensor([[0]]))[0]) > 0.0


def test_loss_dtype_float64_takes_the_softmax_cross_entropy_of_float32_logits_in_float64():
    from test_model_contract import example

    from grokray.engine import PackTrainer
    from grokray.errors import SpecError

    logits = torch.tensor([[[30.0, 0.0, -20.0]]])  # float32 rounds exp(-30) away: a loss of exactly 0
    target = torch.tensor([[0]])
    head = ClassificationHead(3)
    assert float(head.per_sample(logits, target)[0]) == 0.0
    trainer = PackTrainer([example("mlp", "model.loss=cross_entropy", "train.loss_dtype=float64")])
    float64 = trainer.model.head
    loss, correct = float64.per_sample(logits, target)
    assert loss.dtype == torch.float64 and bool(correct)
    assert float(loss) == pytest.approx(math.log1p(math.exp(-30) + math.exp(-50)), rel=1e-12)
    with pytest.raises(SpecError) as err:  # an MSE head has no cross-entropy to compute in float64
        example("mlp", "model.loss=mse", "train.loss_dtype=float64")
    assert "train.loss_dtype" in str(err.value) and "allowed: model" in str(err.value)


def test_muon_steps_as_torchs_muon_does_on_a_matrix():
    """One matrix, two steps, against torch.optim.Muon (Nesterov, AdamW-matched RMS). Torch orthogonalises in
    bfloat16, so the two agree to its rounding, not to float32's."""
    from grokray.optim.group import GroupOptimizer
    from grokray.spec.blocks import OptimConfig

    torch.manual_seed(0)
    w0, grads = torch.randn(8, 5), [torch.randn(8, 5), torch.randn(8, 5)]
    ref = torch.nn.Parameter(w0.clone())
    muon = torch.optim.Muon([ref], lr=0.05, weight_decay=0.1, momentum=0.95, nesterov=True,
                            adjust_lr_fn="match_rms_adamw")
    flat, flat_grad = w0.clone().view(1, -1), torch.zeros(1, 40)
    ours = GroupOptimizer(flat, flat_grad, [OptimConfig(name="muon", lr=0.05, weight_decay=0.1, momentum=0.95)],
                          [0], salt=1, segments=[(0, 40, (8, 5))])
    for i, g in enumerate(grads):
        ref.grad = g.clone()
        muon.step()
        flat_grad.copy_(g.view(1, -1))
        ours.step(i, torch.ones(1, 1, dtype=torch.bool))
        step = (ref.detach() - w0).norm()
        assert (flat.view(8, 5) - ref.detach()).norm() < 0.02 * step  # bfloat16's ~3 digits
    sv = torch.linalg.svdvals(__import__("grokray.optim.primitives", fromlist=["x"]).newton_schulz(
        torch.randn(3, 8, 5, dtype=torch.float64)))
    assert bool((sv > 0.5).all() and (sv < 1.5).all())  # about orthogonal, as the quintic iteration promises


# Every method in one pack, with members that differ in its per-member settings, against each member alone.
METHOD_MEMBERS = {
    "grokfast-ema": (["optim.decoder.grad_filter=ema"],
                     [[], ["optim.decoder.filter_lambda=5", "optim.decoder.filter_alpha=0.9", "seeds=[3]"],
                      ["optim.decoder.filter_lambda=0", "optim.decoder.lr=1e-2"]]),
    "grokfast-ma": (["optim.decoder.grad_filter=ma", "optim.decoder.filter_window=7"],
                    [[], ["optim.decoder.filter_lambda=5", "seeds=[3]"], ["optim.decoder.filter_lambda=0.5"]]),
    "orthogonal": ([], [["optim.decoder.orthogonal=true", "optim.embedding.orthogonal=true"],
                        ["optim.decoder.orthogonal=true", "seeds=[3]"], []]),
    "weight-norm": ([], [["train.weight_norm=initial"], ["train.weight_norm=initial", "optim.decoder.init_scale=0.5",
                                                         "seeds=[3]"], ["train.weight_norm=12"], []]),
    "stablemax": (["train.softmax=stablemax"], [[], ["optim.decoder.lr=1e-2", "seeds=[3]"], ["seeds=[5]"]]),
    "muon": (["optim.decoder.name=muon"],
             [["optim.decoder.momentum=0.95"], ["optim.decoder.lr=1e-2", "optim.decoder.momentum=0.9", "seeds=[3]"],
              ["model.hidden=[16, 48]", "optim.decoder.weight_decay=0.5"]]),  # narrower: padded matrices
}


@pytest.mark.parametrize("method", sorted(METHOD_MEMBERS))
def test_a_pack_member_with_a_method_equals_its_configuration_alone(method):
    shared, members = METHOD_MEMBERS[method]
    cfgs = configs([[*shared, *m] for m in members])
    assert len({pack_signature(c) for c in cfgs}) == 1, "the method's settings must be per member"
    pack = PackTrainer(cfgs)
    pack.run()
    for cfg, packed in zip(cfgs, pack.results(), strict=True):
        assert_same(packed, alone(cfg), tol=1e-5)
    plain = alone(configs([[]])[0])
    assert any(r.curve["train/loss"] != plain.curve["train/loss"] for r in pack.results())  # the method acted


def test_a_held_norm_stays_at_its_target_through_training():
    (cfg,) = configs([["train.weight_norm=initial", "optim.decoder.weight_decay=1.0"]])
    trainer = PackTrainer([cfg])
    start = float(trainer.model.weight_norm()[0])
    trainer.run(until=100)
    assert float(trainer.model.weight_norm()[0]) == pytest.approx(start, rel=1e-9)


def test_the_transformer_packs_a_method_too():
    cfgs = configs([["optim.default.grad_filter=ema", "train.softmax=stablemax"],
                    ["optim.default.grad_filter=ema", "train.softmax=stablemax", "optim.default.filter_lambda=4",
                     "seeds=[1]"]], TRANSFORMER)
    pack = PackTrainer(cfgs)
    pack.run()
    for cfg, packed in zip(cfgs, pack.results(), strict=True):
        assert_same(packed, alone(cfg), tol=1e-5)


@pytest.mark.parametrize(("override", "field", "says"), [
    ("optim.decoder.grad_filter=fast", "optim.decoder.grad_filter", "allowed: none, ema, ma"),
    ("optim.decoder.filter_alpha=1.0", "optim.decoder.filter_alpha", "must be >= 0.0 and < 1.0"),
    ("optim.decoder.filter_lambda=-1", "optim.decoder.filter_lambda", "must be >= 0.0"),
    ("optim.decoder.filter_window=0", "optim.decoder.filter_window", "must be >= 1"),
    ("optim.decoder.orthogonal=maybe", "optim.decoder.orthogonal", "expected true or false"),
    ("train.weight_norm=-2", "train.weight_norm", "must be > 0, 'initial' or 'free'"),
    ("train.softmax=sparsemax", "train.softmax", "allowed: softmax, stablemax"),
    ("model.head=regression", "train.softmax", "stablemax replaces the softmax of a cross-entropy loss"),
])
def test_bad_method_settings_are_one_clear_line(override, field, says):
    overrides = [override] + (["train.softmax=stablemax"] if override.startswith("model.head") else [])
    with pytest.raises(SpecError) as err:
        build_spec(BASE, overrides).first_trial()
    assert err.value.field == field and says in str(err.value)


def test_an_rfm_has_no_gradient_to_filter_or_norm_to_hold():
    rfm = {"task": {"name": "modular", "op": "add", "p": 7, "train_fraction": 0.5}, "model": {"name": "rfm"}}
    with pytest.raises(SpecError) as err:
        build_spec(rfm, ["train.weight_norm=initial"]).first_trial()
    assert err.value.field == "train.weight_norm"
