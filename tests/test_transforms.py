"""The gradient transforms (optim/transforms/), one shared table over every optimizer kind and every transform:
a pack equals each member alone, and an optimizer's state read back from a checkpoint goes on as if never stopped.
A method planted here, in this one file, goes through the same table and through a spec end to end (issue 72: a
new method touched five files). Synthetic float64 groups; about 3 s in all."""

import io

import pytest
import torch
from test_pack import BASE, alone, assert_same, configs

from grokray.engine import PackTrainer, pack_signature
from grokray.errors import SpecError
from grokray.optim.group import GroupOptimizer
from grokray.optim.kinds import KINDS
from grokray.optim.transforms import TRANSFORMS, GradTransform, Setting, register, unregister
from grokray.spec.blocks import parse_optim
from grokray.spec.build import build_spec

# A method of this file's own: g <- g + mu * (g - the previous gradient), mu per member; its state is that gradient.
DELTA = Setting("grad_delta", bool, False, doc="a planted method")
MU = Setting("delta_mu", float, 0.5, bounds={"ge": 0.0}, doc="g <- g + mu (g - g_previous)")


class Delta:
    def __init__(self, grad, configs, segments):
        self.previous, self.seen = torch.zeros_like(grad), 0

    def apply_(self, param, grad, h):
        step = (grad - self.previous) * h["delta_mu"] * (self.seen > 0) * h["grad_delta"]
        self.previous.copy_(grad)
        grad.add_(step)
        self.seen += 1

    def select(self, idx):
        self.previous = self.previous.index_select(0, idx)

    def state_dict(self):
        return {"previous": self.previous.clone(), "seen": self.seen}

    def load_state_dict(self, state):
        self.previous.copy_(state["previous"])
        self.seen = int(state["seen"])


PLANTED = GradTransform("planted_delta", DELTA, True, (MU,), Delta, lambda cfg: 1, order=2)

# Each transform's row: the fields every member sets, then each member's own (its per-member settings differ).
ROWS = {
    "none": ({}, [{}, {"lr": 3e-2}, {}]),
    "grokfast_ema": ({"grad_filter": "ema"}, [{}, {"filter_lambda": 5.0, "filter_alpha": 0.9}, {"filter_lambda": 0.0}]),
    "grokfast_ma": ({"grad_filter": "ma", "filter_window": 3}, [{}, {"filter_lambda": 5.0}, {"filter_lambda": 0.5}]),
    "orthogonal": ({}, [{"orthogonal": True}, {}, {"orthogonal": True, "lr": 3e-2}]),
    "planted_delta": ({"grad_delta": True}, [{}, {"delta_mu": 2.0}, {"grad_delta": False}]),
}
KIND_FIELDS = {"langevin": {"temperature": 1e-4}, "sgd": {"momentum": 0.9}, "muon": {"momentum": 0.95}}
SEGMENTS = [(0, 12, (3, 4)), (12, 20, (8,)), (20, 30, (2, 5))]  # two matrices (Muon's step) and a vector
STEPS = 8


@pytest.fixture
def planted():
    register(PLANTED)
    yield PLANTED
    unregister(PLANTED.name)


def optimizer(kind, members, seeds, p0):
    fields = [{"name": kind, "lr": 1e-2, **KIND_FIELDS.get(kind, {}), **m} for m in members]
    param = p0.clone()
    opt = GroupOptimizer(param, torch.zeros_like(param), [parse_optim(f, "optim.test") for f in fields], seeds,
                         salt=7, segments=SEGMENTS)
    return opt, param


def train(opt, param, grads, start, stop):
    """Steps start..stop-1; each step's gradient reads the weights, so a transform's effect compounds."""
    for t in range(start, stop):
        opt.grad.copy_(grads[t] + 0.1 * param)
        opt.step(t, torch.ones((len(param), 1), dtype=torch.bool))


def table(name):
    shared, own = ROWS[name]
    members = [{**shared, **m} for m in own]
    seeds = [0, 3, 5]
    torch.manual_seed(0)
    p0 = torch.randn(len(members), SEGMENTS[-1][1], dtype=torch.float64)
    grads = torch.randn(STEPS, len(members), p0.shape[1], dtype=torch.float64)
    return members, seeds, p0, grads


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("name", sorted(ROWS))
def test_a_pack_with_a_transform_equals_each_member_alone_and_resumes_from_its_state(kind, name, request):
    if name == PLANTED.name:
        request.getfixturevalue("planted")
    members, seeds, p0, grads = table(name)
    opt, param = optimizer(kind, members, seeds, p0)
    train(opt, param, grads, 0, STEPS)
    for k, member in enumerate(members):
        one, own = optimizer(kind, [member], [seeds[k]], p0[k:k + 1])
        train(one, own, grads[:, k:k + 1], 0, STEPS)
        assert torch.allclose(param[k], own[0], rtol=0, atol=1e-12), (kind, name, k)
    assert not torch.equal(param, p0)
    # a checkpoint after half the steps, through torch.save and a weights-only load, goes on exactly
    first, weights = optimizer(kind, members, seeds, p0)
    train(first, weights, grads, 0, STEPS // 2)
    buffer = io.BytesIO()
    torch.save({"param": weights, "optim": first.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    second, resumed = optimizer(kind, members, seeds, saved["param"])
    second.load_state_dict(saved["optim"])
    train(second, resumed, grads, STEPS // 2, STEPS)
    assert torch.equal(resumed, param), (kind, name)


@pytest.mark.parametrize("name", sorted(set(ROWS) - {"none"}))
def test_a_transform_declares_what_it_reads_and_the_spec_checks_it(name, request):
    """Its settings differ per member within one pack signature; one set without the transform is refused in one
    line naming it; a setting out of its bounds is refused; the memory sizing counts its state."""
    if name == PLANTED.name:
        request.getfixturevalue("planted")
    transform = TRANSFORMS[name]
    shared, own = ROWS[name]
    group = [{**shared, **m} for m in own]
    cfgs = configs([[f"optim.decoder.{k}={v}" for k, v in m.items()] for m in group])
    assert len({pack_signature(c) for c in cfgs}) == 1
    for setting in transform.settings:
        with pytest.raises(SpecError) as err:  # BASE asks for no transform
            build_spec(BASE, [f"optim.decoder.{setting.name}={setting.default}"]).first_trial()
        assert err.value.field == f"optim.decoder.{setting.name}" and "does nothing" in str(err.value)
        for bound in ("ge", "gt"):
            if bound in setting.bounds:
                with pytest.raises(SpecError) as err:
                    parse_optim({**shared, setting.name: setting.bounds[bound] - 1}, "optim.decoder")
                assert err.value.field == f"optim.decoder.{setting.name}"
    first = parse_optim({**shared, **own[0]}, "optim.decoder")
    assert transform.asked(first)
    p = torch.zeros(2, 30, dtype=torch.float64)
    opt = GroupOptimizer(p, torch.zeros_like(p), [first] * 2, [0, 1], salt=1)
    assert opt.tensors_per_parameter() == len(KINDS["adamw"].state) + transform.tensors_per_parameter(first)


def test_every_registered_transform_has_its_row():
    assert set(TRANSFORMS) | {"none", PLANTED.name} == set(ROWS)


def test_a_planted_method_runs_from_a_spec_in_a_pack_as_alone(planted):
    """From YAML-shaped overrides to the group optimizer with nothing but its file: a pack of members with and
    without it, and with their own mu, equals each alone, and it changed the training."""
    short = ["train.steps=60", "phases.budget=60"]
    cfgs = configs([[*short, "optim.decoder.grad_delta=true"],
                    [*short, "optim.decoder.grad_delta=true", "optim.decoder.delta_mu=2", "seeds=[3]"],
                    [*short]])
    pack = PackTrainer(cfgs)
    pack.run()
    results = pack.results()
    for cfg, packed in zip(cfgs, results, strict=True):
        assert_same(packed, alone(cfg), tol=1e-9)
    assert results[0].curve["train/loss"] != alone(configs([[*short]])[0]).curve["train/loss"]
