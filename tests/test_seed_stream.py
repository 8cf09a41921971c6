"""`train.seed_stream: script` and `model.init: pytorch` (issue 51): grokray draws a trial's init, split and epoch
shuffles as a PyTorch script after torch.manual_seed(seed) draws them, so a seed means the paper's seed.

The reference is torch's own modules built in the Grokfast decoder's order, and torch's global generator."""

import math

import pytest
import torch
from test_batches import epoch_spec
from test_model_contract import example

from grokray.engine import PackTrainer, load_checkpoint, save_checkpoint
from grokray.errors import SpecError
from grokray.optim.primitives import warmup_factor

D, P = 16, 7


def published(*extra):
    return example("transformer", "task.op=mul", f"task.p={P}", "task.nonzero_b=true", "task.train_fraction=0.5",
                   f"model.d_model={D}", "model.n_heads=2", f"model.d_mlp={4 * D}", "model.n_layers=2",
                   "model.op_token=true", "model.init=pytorch", "model.head=tokens", "model.block=normed_residual",
                   "model.activation=gelu", "train.batch_size=8", "train.batches=epochs",
                   "train.seed_stream=script", "train.steps=20", "phases.budget=20",
                   "phases.stop_when_classified=false", *extra)


def torch_script_draws(seed: int, n_layers: int = 2):
    """The Grokfast decoder's modules, built in its order after torch.manual_seed(seed), and what it draws next."""
    torch.manual_seed(seed)
    vocab = P + 2
    modules = {"tok": torch.nn.Embedding(vocab, D), "pos": torch.nn.Embedding(5, D)}
    for i in range(n_layers):
        modules[f"l{i}.ln1"], modules[f"l{i}.ln2"] = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
        modules[f"l{i}.attn"] = torch.nn.MultiheadAttention(D, 2)
        modules[f"l{i}.fc1"], modules[f"l{i}.fc2"] = torch.nn.Linear(D, 4 * D), torch.nn.Linear(4 * D, D)
    modules["lnf"], modules["head"] = torch.nn.LayerNorm(D), torch.nn.Linear(D, vocab, bias=False)
    n = P * (P - 1)
    split = torch.randperm(n)
    train = split[: n // 2]
    epochs = [train := train[torch.randperm(len(train))] for _ in range(3)]  # each epoch shuffles the last one
    return modules, split, epochs


def test_init_pytorch_draws_what_torchs_modules_draw_draw_for_draw():
    trainer = PackTrainer([published("seeds=[3]")])
    modules, _, _ = torch_script_draws(3)
    p = trainer.model.p
    assert torch.equal(p("tok")[0], modules["tok"].weight)
    assert torch.equal(p("pos")[0], modules["pos"].weight[:4])  # the answer's row is drawn, never read
    for i in range(2):
        attn = modules[f"l{i}.attn"]
        assert torch.equal(p(f"l{i}.qkv.w")[0], attn.in_proj_weight.T)
        assert torch.equal(p(f"l{i}.out.w")[0], attn.out_proj.weight.T)
        assert (p(f"l{i}.qkv.b") == 0).all() and (p(f"l{i}.out.b") == 0).all()
        for name in ("fc1", "fc2"):
            assert torch.equal(p(f"l{i}.{name}.w")[0], modules[f"l{i}.{name}"].weight.T)
            assert torch.equal(p(f"l{i}.{name}.b")[0], modules[f"l{i}.{name}"].bias)
    assert torch.equal(p("unembed.w")[0], modules["head"].weight.T)


def next_batch(trainer):
    return trainer.batches.next(trainer.train_idx, trainer.n_train, torch.float64)[0]


def test_the_script_stream_splits_and_shuffles_as_the_script_does():
    trainer = PackTrainer([published("seeds=[3]")])
    _, split, epochs = torch_script_draws(3)
    n_train = len(epochs[0])
    assert torch.equal(trainer.train_idx[0, :n_train], split[:n_train])  # training rows in the order drawn
    assert torch.equal(trainer.val_idx[0].sort().values, split[n_train:].sort().values)
    for epoch in epochs:  # 21 rows, batches of 8: 8 + 8 + 5
        seen = torch.cat([next_batch(trainer)[0, :k] for k in (8, 8, 5)])
        assert torch.equal(seen, epoch)
    per_purpose = PackTrainer([published("seeds=[3]", "train.seed_stream=per_purpose")])
    assert not torch.equal(per_purpose.train_idx[0].sort().values, trainer.train_idx[0].sort().values)


def test_the_script_stream_in_a_pack_and_after_a_checkpoint(tmp_path):
    pack = PackTrainer([published("seeds=[3]"), published("seeds=[4]")])
    alone = PackTrainer([published("seeds=[4]")])
    assert torch.equal(pack.train_idx[1], alone.train_idx[0])
    whole = PackTrainer([published("seeds=[4]")])
    whole.run()
    part = PackTrainer([published("seeds=[4]")])
    part.run(until=9)  # mid-way through the second epoch, whose order continues the first's
    save_checkpoint(part, tmp_path / "pack.pt")
    resumed = PackTrainer([published("seeds=[4]")])
    load_checkpoint(resumed, tmp_path / "pack.pt")
    resumed.run()
    for g, flat in whole.model.flat.items():
        assert torch.equal(flat, resumed.model.flat[g])


@pytest.mark.parametrize("bad, words", [
    (["train.batches=iid"], "batches: epochs"),
    (["task.split_mode=withhold_diagonal", "task.train_fraction=null"], "split_mode: random"),
    (["task.split_seed=5"], "no split_seed"),
])
def test_the_script_stream_refuses_what_no_script_draws(bad, words):
    with pytest.raises(SpecError) as err:
        published(*bad)
    assert "train.seed_stream" in str(err.value) and words in str(err.value)


def test_warmup_from_zero_is_torchs_lambdalr():
    steps = torch.tensor([10.0])
    ours = [warmup_factor(s, steps).item() for s in range(12)]
    from_zero = [warmup_factor(s, steps, from_zero=True).item() for s in range(12)]
    assert ours == pytest.approx([(s + 1) / 10 for s in range(10)] + [1.0, 1.0])
    assert from_zero == pytest.approx([s / 10 for s in range(11)] + [1.0])  # lambda u: 1 if u > 10 else u / 10
    assert [warmup_factor(s, 10, True) for s in range(12)] == pytest.approx(from_zero)  # one member's int
    assert warmup_factor(0, torch.tensor([0.0]), True).item() == 1.0  # no warm-up: full lr from the first step


@pytest.mark.parametrize("kind", ["adam", "adamw"])
def test_the_first_update_from_zero_moves_nothing_but_feeds_adams_moments(kind):
    def trainer(*extra):
        return PackTrainer([epoch_spec(f"optim.default.name={kind}", "optim.default.warmup_steps=4", *extra)])

    zero, ours = trainer("optim.default.warmup_from_zero=true"), trainer()
    before = {g: f.clone() for g, f in zero.model.flat.items()}
    zero.run(until=1)
    ours.run(until=1)
    for g, flat in zero.model.flat.items():
        assert torch.equal(flat, before[g]) and not torch.equal(ours.model.flat[g], before[g])
        assert float(zero.optimizers[g].state["exp_avg_sq"].abs().sum()) > 0
    zero.run(until=2)
    assert not math.isclose(float((zero.model.flat["decoder"] - before["decoder"]).abs().sum()), 0.0)


def test_warmup_from_zero_needs_a_warmup():
    with pytest.raises(SpecError) as err:
        example("transformer", "optim.default.warmup_from_zero=true")
    assert "warmup_from_zero" in str(err.value) and "warmup_steps > 0" in str(err.value)
