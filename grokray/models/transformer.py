"""Decoder-only transformer on `a b =` (or `a op b =`) sequences, as in Power et al. and Liu et al. §4.2."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from ..errors import SpecError
from ..spec.blocks import bounded
from . import MODELS
from .base import PackedModel
from .heads import ClassificationHead
from .layers import ACTIVATIONS, layer_norm, linear, linear_init, normal


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal softmax attention of the last Tq positions over all T; q [N, Tq, heads, d_head], k and v [N, T, ...].

    Written out as broadcast products in the [N, T, heads, d_head] layout the projections produce: on 3-4 token
    sequences torch's fused attention kernel, and the head transposes it needs, were a third of a packed step.
    """
    tq, t = q.shape[1], k.shape[1]
    scores = (q.unsqueeze(2) * k.unsqueeze(1)).sum(-1) * q.shape[-1] ** -0.5  # [N, Tq, T, heads]
    future = torch.ones(tq, t, dtype=torch.bool, device=q.device).triu(t - tq + 1).view(tq, t, 1)
    weights = scores.masked_fill(future, float("-inf")).softmax(2)
    return (weights.unsqueeze(-1) * v.unsqueeze(1)).sum(2)


def torch_module_init(cfg, data, gen: torch.Generator, e: float, s: float) -> dict[str, torch.Tensor]:
    """What torch's modules draw when a script builds this decoder after torch.manual_seed(seed), draw for draw:
    their order, shapes and float32, from `gen` (the Grokfast code's model, `init: pytorch`).

    nn.Embedding draws N(0, 1) for the tokens, then the positions, with a row for the answer too (the script's
    table covers the whole equation; the row is never read, so it is dropped). Each block's nn.MultiheadAttention
    builds its out-projection nn.Linear (weight, then a bias it later zeroes), then draws its in-projection
    Xavier-uniform; then the MLP's two nn.Linear; the head is an nn.Linear without bias. torch stores a linear
    as [out, in]; grokray's are [in, out], hence the transposes. `e` and `s` are the groups' init scales.
    """
    init, d, n_pos = torch.nn.init, cfg.d_model, (4 if cfg.op_token else 3)

    def linear(fan_in, fan_out, bias=True):  # nn.Linear.reset_parameters, in its order
        w = init.kaiming_uniform_(torch.empty(fan_out, fan_in), a=math.sqrt(5), generator=gen).T * s
        bound = 1 / math.sqrt(fan_in)
        b = init.uniform_(torch.empty(fan_out), -bound, bound, generator=gen) * s if bias else None
        return w, b

    params = {"tok": init.normal_(torch.empty(TransformerModel.vocab(cfg, data), d), generator=gen) * e,
              "pos": init.normal_(torch.empty(n_pos + 1, d), generator=gen)[:n_pos] * e}
    for i in range(cfg.n_layers):
        params[f"l{i}.ln1.w"], params[f"l{i}.ln1.b"] = torch.ones(d), torch.zeros(d)
        out_w, _ = linear(d, d)  # nn.MultiheadAttention zeroes this bias and its in-projection's
        params[f"l{i}.qkv.w"] = init.xavier_uniform_(torch.empty(3 * d, d), generator=gen).T * s
        params[f"l{i}.qkv.b"], params[f"l{i}.out.w"], params[f"l{i}.out.b"] = torch.zeros(3 * d), out_w, torch.zeros(d)
        params[f"l{i}.ln2.w"], params[f"l{i}.ln2.b"] = torch.ones(d), torch.zeros(d)
        params[f"l{i}.fc1.w"], params[f"l{i}.fc1.b"] = linear(d, cfg.d_mlp)
        params[f"l{i}.fc2.w"], params[f"l{i}.fc2.b"] = linear(cfg.d_mlp, d)
    params["lnf.w"], params["lnf.b"] = torch.ones(d), torch.zeros(d)
    params["unembed.w"] = linear(d, TransformerModel.outputs(cfg, data), bias=False)[0]
    return params


@dataclass
class TransformerConfig:
    n_layers: int = bounded(1, ge=1)
    d_model: int = bounded(128, ge=1)
    n_heads: int = bounded(4, ge=1)
    d_mlp: int = bounded(512, ge=1)
    dropout: float = bounded(0.0, ge=0.0, lt=1.0)
    activation: Literal["relu", "gelu"] = "relu"
    positional: Literal["learned", "none"] = "learned"
    layer_norm: bool = True
    op_token: bool = False  # sequence `a op b =` instead of `a b =`
    # pre_ln: x + attn(ln1(x)), then x + mlp(ln2(x)); normed_residual: the stream itself is normalised first,
    # x = ln1(x); x = x + attn(x); x = x + mlp(ln2(x)) (the Grokfast authors' block)
    block: Literal["pre_ln", "normed_residual"] = "pre_ln"
    # scaled: embeddings N(0, 1/d), every linear U(+-1/sqrt(fan_in)) with its bias; pytorch: torch's defaults for
    # nn.Embedding (N(0, 1)) and nn.MultiheadAttention (Xavier-uniform projections, zero biases), as the Grokfast
    # code leaves them, drawn as torch's modules draw them (torch_module_init)
    init: Literal["scaled", "pytorch"] = "scaled"
    head: Literal["answers", "tokens"] = "answers"  # tokens: logits over every token (p + 2), as the Grokfast code

    def validate(self, path):
        if self.d_model % self.n_heads:
            raise SpecError(f"{path}.n_heads", f"got {self.n_heads}; must divide d_model={self.d_model}")


@MODELS.register("transformer", TransformerConfig)
class TransformerModel(PackedModel):
    example = {  # the contract-test size
        "task": {"name": "modular", "p": 5, "train_fraction": 0.6},
        "model": {"name": "transformer", "d_model": 8, "n_heads": 2, "d_mlp": 16},
        "optim": {"default": {"name": "adamw", "lr": 1e-2}},
    }

    groups = ("embedding", "decoder")
    per_member_fields = frozenset({"d_mlp", "dropout"})
    joint_forward = False  # its backward over the held-out rows cost a third of a step at fraction 0.5

    @property
    def uses_dropout(self):
        return any(c.dropout > 0 for c in self.configs)

    @staticmethod
    def vocab(cfg, data) -> int:
        return data.vocab_size + (2 if cfg.op_token else 1)  # symbols, '=', and optionally 'op'

    @staticmethod
    def init_member(cfg, data, gen, init_scales):
        if cfg.init == "pytorch":
            return torch_module_init(cfg, data, gen, init_scales["embedding"], init_scales["decoder"])
        d, e, s = cfg.d_model, init_scales["embedding"], init_scales["decoder"]
        seq, vocab = (4 if cfg.op_token else 3), TransformerModel.vocab(cfg, data)
        std = 1 / math.sqrt(d)
        params = {"tok": normal(gen, (vocab, d), std) * e, "pos": normal(gen, (seq, d), std) * e}
        for i in range(cfg.n_layers):
            params[f"l{i}.ln1.w"], params[f"l{i}.ln1.b"] = torch.ones(d), torch.zeros(d)
            params[f"l{i}.qkv.w"], params[f"l{i}.qkv.b"] = linear_init(gen, d, 3 * d, True, s)
            params[f"l{i}.out.w"], params[f"l{i}.out.b"] = linear_init(gen, d, d, True, s)
            params[f"l{i}.ln2.w"], params[f"l{i}.ln2.b"] = torch.ones(d), torch.zeros(d)
            params[f"l{i}.fc1.w"], params[f"l{i}.fc1.b"] = linear_init(gen, d, cfg.d_mlp, True, s)
            params[f"l{i}.fc2.w"], params[f"l{i}.fc2.b"] = linear_init(gen, cfg.d_mlp, d, True, s)
        params["lnf.w"], params["lnf.b"] = torch.ones(d), torch.zeros(d)
        params["unembed.w"] = linear_init(gen, d, TransformerModel.outputs(cfg, data), False, s)[0]
        return params

    @staticmethod
    def outputs(cfg, data) -> int:
        return TransformerModel.vocab(cfg, data) if cfg.head == "tokens" else data.num_classes

    def make_head(self, configs, data, gens, dtype, device):
        self.eq_token = data.vocab_size
        self.op_token = data.vocab_size + 1
        self.dropout = torch.tensor([c.dropout for c in configs], dtype=dtype, device=device)
        return ClassificationHead(self.outputs(self.cfg, data))

    @staticmethod
    def cross_entropy(model, task) -> bool:
        return True

    @staticmethod
    def check_task(model, task, path):
        if not getattr(task, "symbolic", False):
            raise SpecError(
                "task.name",
                f"model 'transformer' embeds symbols; got task {task.registry_name!r}, allowed: "
                "modular, addition, permutation",
            )

    def group_of(self, name):
        return "embedding" if name in ("tok", "pos") else "decoder"

    def symbol_weights(self):
        return self.p("tok")

    def io_names(self):
        return {"tok", "pos", "unembed.w"}  # token and position embeddings, the unembedding

    def embeddings(self):
        return self.p("tok")  # the operand tokens come first; '=' and the op token are past p

    def select_extra(self, idx):
        self.dropout = self.dropout.index_select(0, idx)

    def tokens(self, x):
        """[K, B, 2] symbol pairs -> [K, B, 3 or 4] token ids ending in '='."""
        eq = torch.full_like(x[..., :1], self.eq_token)
        if self.cfg.op_token:
            return torch.cat([x[..., :1], torch.full_like(eq, self.op_token), x[..., 1:2], eq], -1)
        return torch.cat([x, eq], -1)

    def drop(self, h, rng):
        """Per-member dropout rate, with masks drawn from each member's own generator."""
        if rng is None or not self.uses_dropout:
            return h
        keep = 1 - self.dropout.view(-1, *([1] * (h.dim() - 1)))
        return h * (rng.rand(h.shape[1:], h.dtype, h.device) < keep) / keep

    def norm(self, h, name):
        return layer_norm(h, self.p(f"{name}.w"), self.p(f"{name}.b")) if self.cfg.layer_norm else h

    def forward(self, x, rng=None):
        cfg, p = self.cfg, self.p
        tok = self.tokens(x)
        K, B, T = tok.shape
        k = torch.arange(K, device=tok.device).view(-1, 1, 1)
        h = p("tok")[k, tok]  # [K, B, T, d]
        if cfg.positional == "learned":
            h = h + p("pos")[:, :T].unsqueeze(1)
        d, H = cfg.d_model, cfg.n_heads
        act = ACTIVATIONS[cfg.activation]
        for i in range(cfg.n_layers):
            # Only the '=' position is read out, so the last layer computes its query, attention, MLP and
            # residual for that position alone (every position still gives keys and values).
            keep = 1 if i == cfg.n_layers - 1 else T
            a = self.norm(h, f"l{i}.ln1")
            if cfg.block == "normed_residual":
                h = a  # the residual stream itself is normalised
            w, b = p(f"l{i}.qkv.w"), p(f"l{i}.qkv.b")
            queries = a if keep == T else a[:, :, T - keep :]
            q = linear(queries.reshape(K, B * keep, d), w[..., :d], b[:, :d]).view(K * B, keep, H, d // H)
            kv = linear(a.reshape(K, B * T, d), w[..., d:], b[:, d:]).view(K * B, T, 2, H, d // H)
            att = causal_attention(q, *kv.unbind(2)).reshape(K, B * keep, d)
            out = linear(att, p(f"l{i}.out.w"), p(f"l{i}.out.b")).view(K, B, keep, d)
            h = (h if keep == T else h[:, :, T - keep :]) + self.drop(out, rng)
            m = self.norm(h, f"l{i}.ln2").reshape(K, B * keep, d)
            m = linear(act(linear(m, p(f"l{i}.fc1.w"), p(f"l{i}.fc1.b"))), p(f"l{i}.fc2.w"), p(f"l{i}.fc2.b"))
            h = h + self.drop(m.view(K, B, keep, d), rng)
        last = self.norm(h[:, :, -1], "lnf")  # the '=' position predicts the answer
        return torch.bmm(last, p("unembed.w"))
