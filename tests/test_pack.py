"""Packed trials: a member of a pack computes exactly what it computes alone (float64), independently."""

import math

import pytest
import torch

from grokray.engine import PackTrainer, load_checkpoint, pack_signature, save_checkpoint
from grokray.spec.build import build_spec

BASE = {
    "task": {"name": "addition", "p": 10, "train_size": 45},
    "model": {"name": "toy", "embed_dim": 2, "hidden": [48, 48], "head": "classification"},
    "optim": {"embedding": {"name": "adamw", "lr": 3e-3}, "decoder": {"name": "adamw", "lr": 3e-3}},
    "train": {"steps": 250, "dtype": "float64"},
    "phases": {"budget": 250, "gap": 40},
}
# Mixed widths, data fractions, learning rates, weight decays, init scales and seeds; the last one diverges.
MEMBERS = [
    [],
    ["model.hidden=[16, 48]", "seeds=[3]"],
    ["task.train_size=30", "optim.decoder.weight_decay=1.0"],
    ["optim.decoder.lr=1e-2", "optim.embedding.init_scale=3.0", "seeds=[5]"],
    ["model.hidden=[32, 8]", "task.train_size=20", "optim.decoder.lr=1e-3", "train.steps=120"],
]
SGD = {**BASE, "model": {**BASE["model"], "head": "regression"},
       "optim": {"default": {"name": "sgd", "lr": 0.05, "momentum": 0.9}}}
DIVERGING = ["optim.default.lr=1e3", "seeds=[4]"]


def configs(members, base=BASE):
    return [build_spec(base, over).first_trial() for over in members]


def alone(cfg):
    t = PackTrainer([cfg])
    t.run()
    return t.results()[0]


def assert_same(a, b, tol=1e-6):
    assert (a.phase, a.step_train, a.step_val, a.steps_run) == (b.phase, b.step_train, b.step_val, b.steps_run)
    assert a.curve["step"] == b.curve["step"]
    for key in ("train/acc", "val/acc", "train/loss", "val/loss", "weight_norm"):
        x, y = (torch.tensor([math.nan if v is None else v for v in r.curve[key]]) for r in (a, b))
        assert torch.allclose(x, y, atol=tol, rtol=0, equal_nan=True), key


# The transformer trains "split" (training rows with gradients, held-out rows without), the others "joint".
TRANSFORMER = {
    "task": {"name": "modular", "p": 7, "train_fraction": 0.5},
    "model": {"name": "transformer", "d_model": 8, "n_heads": 2, "d_mlp": 16},
    "optim": {"default": {"name": "adamw", "lr": 3e-3, "weight_decay": 1.0}},  # at 1e-2 loss spikes amplify 1e-16
    "train": {"steps": 200, "dtype": "float64"},
    "phases": {"budget": 200, "gap": 40},
}
TRANSFORMER_MEMBERS = [[], ["task.train_fraction=0.3", "seeds=[1]"], ["task.train_fraction=0.8", "model.d_mlp=8"]]


@pytest.mark.parametrize(
    ("base", "members"),
    [(BASE, MEMBERS), (SGD, MEMBERS[:3] + [DIVERGING]), (TRANSFORMER, TRANSFORMER_MEMBERS)],
    ids=["adamw", "sgd", "transformer-split"],
)
def test_pack_members_match_their_solo_runs(base, members):
    cfgs = configs(members, base)
    assert len({pack_signature(c) for c in cfgs}) == 1
    pack = PackTrainer(cfgs)
    pack.run()
    results = pack.results()
    for cfg, packed in zip(cfgs, results, strict=True):
        assert_same(packed, alone(cfg))
    if members[-1] is DIVERGING:
        assert results[-1].phase == "diverged" and [r.phase for r in results[:-1]].count("diverged") == 0


def test_diverging_member_leaves_the_others_untouched():
    calm = configs([[], ["seeds=[1]", "optim.default.lr=0.02"]], SGD)
    (wild,) = configs([DIVERGING], SGD)
    pack = PackTrainer([calm[0], wild, calm[1]])
    pack.run()
    results = pack.results()
    assert results[1].phase == "diverged" and results[1].steps_run < 250
    for cfg, r in zip(calm, (results[0], results[2]), strict=True):
        assert r.phase != "diverged"
        assert_same(r, alone(cfg), tol=0.0)  # bit-identical: NaN in one slice never reaches another


def test_pack_resume_gives_identical_final_state(tmp_path):
    cfgs = configs(MEMBERS[:5])
    whole = PackTrainer(cfgs)
    whole.run()
    part = PackTrainer(cfgs)
    part.run(until=77)
    save_checkpoint(part, tmp_path / "pack.pt")
    resumed = PackTrainer(cfgs)
    load_checkpoint(resumed, tmp_path / "pack.pt")
    resumed.run()
    for g in whole.model.flat:
        assert torch.equal(whole.model.flat[g], resumed.model.flat[g])
    for a, b in zip(whole.results(), resumed.results(), strict=True):
        assert_same(a, b, tol=0.0)


def test_members_finish_on_their_own():
    cfgs = configs([["train.steps=120"], [], DIVERGING], SGD)
    pack = PackTrainer(cfgs)
    pack.run()
    short, full, wild = pack.results()
    assert (short.steps_run, full.steps_run) == (120, 250)
    assert short.curve["step"][-1] == 120 and full.curve["step"][-1] == 250
    assert wild.phase == "diverged" and wild.steps_run < 120


def test_incompatible_configs_refuse_to_share_a_pack():
    cfgs = configs([[], ["model.embed_dim=3"]])
    assert pack_signature(cfgs[0]) != pack_signature(cfgs[1])
    with pytest.raises(ValueError, match="share"):
        PackTrainer(cfgs)


COMPACTING = {  # members, base, resume point, members still packed there, tolerance against solo runs
    # joint step: compacted as members stopped (a quarter at a time): two of four left at step 150
    "joint": ([["train.steps=120"], [], DIVERGING, ["seeds=[7]", "optim.default.lr=0.02"]], SGD, 150, [1, 3], 1e-6),
    # split step: the held-out index sets are compacted and checkpointed too (short members leave at 60 and 80)
    "split": ([["train.steps=60"], ["task.train_fraction=0.3", "train.steps=80"], ["seeds=[2]"]], TRANSFORMER, 100,
              [2], 1e-9),
}


@pytest.mark.parametrize("case", COMPACTING.values(), ids=COMPACTING.keys())
def test_compaction_drops_finished_members_and_survives_resume(tmp_path, case):
    members, base, until, still_packed, tol = case
    cfgs = configs(members, base)
    whole = PackTrainer(cfgs)
    whole.run()
    part = PackTrainer(cfgs)
    part.run(until=until)
    assert part.K == len(still_packed) and part.members == still_packed
    assert part.split == (base is TRANSFORMER) and part.joint == (base is not TRANSFORMER)
    save_checkpoint(part, tmp_path / "pack.pt")
    resumed = PackTrainer(cfgs)
    load_checkpoint(resumed, tmp_path / "pack.pt")
    resumed.run()
    for cfg, a, b in zip(cfgs, whole.results(), resumed.results(), strict=True):
        assert_same(a, b, tol=0.0)
        assert_same(a, alone(cfg), tol=tol)


def test_split_step_measures_what_the_joint_step_measures(monkeypatch):
    """Mixed fractions pad both index sets; padded rows must count nowhere. Same curves as one all-points forward."""
    from grokray.models.transformer import TransformerModel

    cfgs = configs(TRANSFORMER_MEMBERS, TRANSFORMER)
    split = PackTrainer(cfgs)
    assert split.split and not split.joint
    split.run()
    monkeypatch.setattr(TransformerModel, "joint_forward", True)
    joint = PackTrainer(cfgs)
    assert joint.joint and not joint.split
    joint.run()
    for a, b in zip(split.results(), joint.results(), strict=True):
        assert_same(a, b, tol=1e-9)
    assert {r.phase for r in split.results()} != {"confusion"}  # the comparison covers learning, not only noise

