"""The Grokfast benchmark's transformer as published (issue 51), option by option, on hand-built cases: the block
that normalises the residual stream, torch's default initialisation, logits over every token, the `a op b =` input.

The reference is torch's own nn.MultiheadAttention, nn.LayerNorm and nn.Linear wired as the authors' block
(x = ln_1(x); x = x + attn(x); x = x + mlp(ln_2(x))), with the packed model's weights copied in.
"""

import math

import torch
import torch.nn.functional as F

from grokray.models import MODELS
from grokray.spec import build_spec

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
