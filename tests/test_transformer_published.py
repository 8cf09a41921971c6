"""The Grokfast benchmark's transformer as published (issue 51), option by option, on hand-built cases: the block
that normalises the residual stream, torch's default initialisation, logits over every token, the `a op b =` input.

The reference is torch's own nn.MultiheadAttention, nn.LayerNorm and nn.Linear wired as the authors' block
(x = ln_1(x); x = x + attn(x); x = x + mlp(ln_2(x))), with the packed model's weights copied in.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from grokray.models import MODELS
from grokray.spec.build import build_spec

PUBLISHED = ["model.block=normed_residual", "model.init=pytorch", "model.head=tokens", "model.op_token=true",
             "model.activation=gelu"]


def build(d=8, heads=2, layers=2, *overrides):
    raw = {"task": {"name": "modular", "op": "mul", "p": 7, "nonzero_b": True, "train_fraction": 0.5},
           "model": {"name": "transformer", "n_layers": layers, "d_model": d, "n_heads": heads, "d_mlp": 4 * d},
           "train": {"dtype": "float64"}}
    cfg = build_spec(raw, [*PUBLISHED, *overrides]).first_trial()
    data = cfg.task.data()
    family = MODELS.get("transformer").build
    model = family([cfg.model], data, [0], [{"embedding": 1.0, "decoder": 1.0}], torch.float64, "cpu")
    return model, data


def reference_logits(model, x):
    """The authors' decoder on [a, op, b, =] (sequence first, as their nn.MultiheadAttention takes it)."""
    p, cfg = model.p, model.cfg
    d = cfg.d_model
    tokens = model.tokens(x.unsqueeze(0))[0].T  # [T, N]
    h = p("tok")[0][tokens] + p("pos")[0][: tokens.shape[0]].unsqueeze(1)
    mask = torch.full((4, 4), -math.inf, dtype=torch.float64).triu(1)
    for i in range(cfg.n_layers):
        attn = torch.nn.MultiheadAttention(d, cfg.n_heads, dtype=torch.float64)
        with torch.no_grad():
            attn.in_proj_weight.copy_(p(f"l{i}.qkv.w")[0].T)
            attn.in_proj_bias.copy_(p(f"l{i}.qkv.b")[0])
            attn.out_proj.weight.copy_(p(f"l{i}.out.w")[0].T)
            attn.out_proj.bias.copy_(p(f"l{i}.out.b")[0])
        h = F.layer_norm(h, (d,), p(f"l{i}.ln1.w")[0], p(f"l{i}.ln1.b")[0])
        h = h + attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        m = F.layer_norm(h, (d,), p(f"l{i}.ln2.w")[0], p(f"l{i}.ln2.b")[0])
        m = F.gelu(m @ p(f"l{i}.fc1.w")[0] + p(f"l{i}.fc1.b")[0]) @ p(f"l{i}.fc2.w")[0] + p(f"l{i}.fc2.b")[0]
        h = h + m
    h = F.layer_norm(h, (d,), p("lnf.w")[0], p("lnf.b")[0])
    return (h @ p("unembed.w")[0])[-1]


def test_the_published_block_equals_torchs_modules_wired_as_the_authors_wired_them():
    model, data = build()
    with torch.no_grad():
        for _, leaf in model.named_stacked():  # move every weight off its init, biases and norms included
            leaf.add_(0.3 * torch.randn_like(leaf))
        ours = model(data.x.unsqueeze(0))[0]
    assert ours.shape == (len(data.x), 7 + 2)  # logits over every token: 7 symbols, '=' and the op
    assert torch.allclose(ours, reference_logits(model, data.x), atol=1e-10, rtol=0)
    pre_ln, _ = build(8, 2, 2, "model.block=pre_ln")
    with torch.no_grad():
        for (_, a), (_, b) in zip(model.named_stacked(), pre_ln.named_stacked(), strict=True):
            b.copy_(a)
        assert not torch.allclose(pre_ln(data.x.unsqueeze(0))[0], ours, atol=1e-3)  # the order matters


def test_torchs_default_initialisation_has_its_statistics():
    model, _ = build(256, 4, 1)
    d = 256
    tok, qkv, out = model.p("tok")[0], model.p("l0.qkv.w")[0], model.p("l0.out.w")[0]
    assert abs(tok.std().item() - 1.0) < 0.05  # nn.Embedding: N(0, 1)
    xavier = math.sqrt(6 / (d + 3 * d))  # nn.MultiheadAttention's in-projection [3d, d]
    assert qkv.abs().max().item() <= xavier and abs(qkv.std().item() - xavier / math.sqrt(3)) < 0.01 * xavier * 3
    assert (model.p("l0.qkv.b") == 0).all() and (model.p("l0.out.b") == 0).all()
    assert out.abs().max().item() <= 1 / math.sqrt(d)  # out_proj keeps nn.Linear's U(+-1/sqrt(fan_in))
    scaled, _ = build(256, 4, 1, "model.init=scaled")
    assert abs(scaled.p("tok")[0].std().item() - 1 / math.sqrt(d)) < 0.005  # grokray's: N(0, 1/d)
    assert (scaled.p("l0.qkv.b") != 0).any()


def test_the_answers_head_keeps_p_classes():
    model, data = build(8, 2, 1, "model.head=answers")
    assert model(data.x[:5].unsqueeze(0)).shape[-1] == 7


def muon_pack(*overrides):
    from test_model_contract import example

    from grokray.engine import PackTrainer

    return PackTrainer([example("transformer", "optim.default.name=muon", "optim.default.momentum=0.95",
                                "model.n_layers=1", *overrides)])


def test_muon_takes_the_hidden_matrices_and_leaves_embeddings_and_head_to_adamw():
    hidden, every = muon_pack(), muon_pack("optim.default.muon_on=all")
    layout = hidden.model.layout

    def names(trainer, group):
        spans = {(a, b) for a, b, _ in trainer.optimizers[group].matrix_segments}
        return {n for n, (g, a, b, _) in layout.items() if g == group and (a, b) in spans}

    assert names(hidden, "embedding") == set() and names(every, "embedding") == {"tok", "pos"}
    assert names(hidden, "decoder") == {"l0.qkv.w", "l0.out.w", "l0.fc1.w", "l0.fc2.w"}
    assert names(every, "decoder") == names(hidden, "decoder") | {"unembed.w"}
    from test_model_contract import example

    from grokray.engine import PackTrainer

    adamw = PackTrainer([example("transformer", "model.n_layers=1")])  # the example's AdamW, the same lr
    for trainer in (hidden, adamw):
        trainer.run(until=1)
    # the embeddings took AdamW's step (to rounding: fused kernel or not); a hidden matrix took Muon's
    assert torch.allclose(hidden.model.p("tok"), adamw.model.p("tok"), atol=1e-6, rtol=0)
    assert not torch.allclose(hidden.model.p("l0.fc1.w"), adamw.model.p("l0.fc1.w"), atol=1e-4, rtol=0)


def test_muon_on_needs_muon():
    from test_model_contract import example

    from grokray.errors import SpecError

    with pytest.raises(SpecError) as err:
        example("transformer", "optim.default.muon_on=all")
    assert "muon_on" in str(err.value) and "name: muon" in str(err.value)


def test_the_stablemax_loss_is_computed_in_float64():
    from grokray.models.heads import ClassificationHead

    head = ClassificationHead(5)
    head.stablemax = True
    logits = torch.tensor([[[30.0, -80.0, 0.5, 1.0, -1.0]]])  # float32 logits
    loss, correct = head.per_sample(logits, torch.tensor([[1]]))
    assert loss.dtype == torch.float64 and bool(correct[0, 0]) is False
    assert loss.item() == pytest.approx(math.log(31 + 1 / 81 + 1.5 + 2 + 0.5) - math.log(1 / 81), rel=1e-12)
